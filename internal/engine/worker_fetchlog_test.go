package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/store"
)

// failingFetches is a store whose FetchTasks fails while down is set, as
// when the database is away.
type failingFetches struct {
	store.Store
	down  atomic.Bool
	fails atomic.Int64
}

func (s *failingFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	if s.down.Load() {
		s.fails.Add(1)
		return nil, errors.New("fetch tasks: connection refused")
	}
	return s.Store.FetchTasks(ctx, p)
}

// TestFetchFailuresLoggedOncePerOutage: a worker whose fetches keep
// failing warns once when they start failing and says once when they work
// again, with the attempts in between at debug level. It used to warn at
// every attempt: a line per worker every few seconds for as long as the
// database was away.
func TestFetchFailuresLoggedOncePerOutage(t *testing.T) {
	var logs logBuffer
	st := &failingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	st.down.Store(true)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	ran := make(chan struct{}, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"outage"}, Concurrency: 1, Handle: func(context.Context, *store.Task) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	}})
	waitFor(t, "five failed fetches", func() bool { return st.fails.Load() >= 5 })
	st.down.Store(false)
	mustEnqueue(t, e, "outage", `1`)
	waitFor(t, "the task to run after the outage", func() bool {
		select {
		case <-ran:
			return true
		default:
			return false
		}
	})
	waitFor(t, "the recovery line", func() bool { return strings.Contains(logs.String(), "fetches work again") })
	out := logs.String()
	if n := strings.Count(out, "fetch failed"); n != 1 {
		t.Fatalf("%d fetch failure lines at info level or above for %d failed fetches, want 1:\n%s", n, st.fails.Load(), out)
	}
	if !strings.Contains(out, "level=WARN msg=\"fetch failed; backing off\"") {
		t.Fatalf("the first failure is not a warning:\n%s", out)
	}
}
