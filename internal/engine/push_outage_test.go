package engine

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// startPushOutage starts an engine over a store whose fetches fail (down
// set) and gives typ a target that reports when each delivery arrives.
func startPushOutage(t *testing.T, backend, typ string, log *slog.Logger) (*Engine, *failingFetches, <-chan time.Time) {
	t.Helper()
	st := &failingFetches{Store: openWorkerStoreOn(t, backend)}
	st.down.Store(true)
	arrived := make(chan time.Time, 64)
	srv := target(t, func(http.ResponseWriter, *http.Request) {
		select {
		case arrived <- time.Now():
		default:
		}
	})
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute, Logger: log})
	if _, err := e.PutType(context.Background(), TypeSpec{Type: typ, Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatalf("put type: %v", err)
	}
	return e, st, arrived
}

// TestPushFetchesAtOnceAfterAnOutage: a push task enqueued right after the
// store answers again is delivered within a fraction of a second, however
// long the push fetches failed before: the enqueue's wake-up cuts the
// fetch backoff short, as for in-process workers. After nine failures in a
// row the push fetcher slept 2.56 s (and up to 5 s later) whatever
// happened meanwhile.
func TestPushFetchesAtOnceAfterAnOutage(t *testing.T) {
	backendtest.Run(t, testPushFetchesAtOnceAfterAnOutage)
}

func testPushFetchesAtOnceAfterAnOutage(t *testing.T, backend string) {
	e, st, arrived := startPushOutage(t, backend, "push.outage.wake", nil)
	waitFor(t, "nine failed fetches", func() bool { return st.fails.Load() >= 9 })
	st.down.Store(false)
	enqueued := time.Now()
	mustEnqueue(t, e, "push.outage.wake", `1`)
	at := recvWithin(t, arrived, 10*time.Second, "the delivery")
	if d := at.Sub(enqueued); d > 600*time.Millisecond {
		t.Fatalf("the task was delivered %s after its enqueue, after %d failed fetches", d, st.fails.Load())
	}
}

// TestPushFetchesWithinASecondOfAnOutageWithoutWakeUps: a push task that
// became pending without a wake-up to this engine (another process's
// insert) is delivered within about a second of the store answering
// again: the push fetcher's backoff is capped there, as a worker's. It
// grew to 5 s.
func TestPushFetchesWithinASecondOfAnOutageWithoutWakeUps(t *testing.T) {
	_, st, arrived := startPushOutage(t, "sqlite", "push.outage.quiet", nil)
	if _, err := st.Store.InsertTasks(context.Background(), store.InsertParams{Now: time.Now(),
		Tasks: []store.NewTask{{ID: NewID(time.Now()), Type: "push.outage.quiet", Payload: []byte(`1`), MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nine failed fetches", func() bool { return st.fails.Load() >= 9 })
	st.down.Store(false)
	up := time.Now()
	at := recvWithin(t, arrived, 10*time.Second, "the delivery")
	if d := at.Sub(up); d > 1600*time.Millisecond {
		t.Fatalf("the task was delivered %s after the store answered again, after %d failed fetches", d, st.fails.Load())
	}
}

// TestPushFetchRetriesStayBoundedUnderWakeUps: wake-ups cut the backoff of
// a push fetcher whose fetches fail, but not below fetchRetryFloor: a
// stream of enqueues (which commit: only the fetches fail) does not turn
// its retries into one failed fetch per enqueue.
func TestPushFetchRetriesStayBoundedUnderWakeUps(t *testing.T) {
	e, st, _ := startPushOutage(t, "sqlite", "push.outage.busy", nil)
	waitFor(t, "a failed fetch", func() bool { return st.fails.Load() >= 1 })
	before, start := st.fails.Load(), time.Now()
	enqueues := 0
	for time.Since(start) < time.Second {
		mustEnqueue(t, e, "push.outage.busy", `1`)
		enqueues++
	}
	elapsed := time.Since(start)
	if n, limit := st.fails.Load()-before, int64(elapsed/fetchRetryFloor)+8; n > limit {
		t.Fatalf("%d failed fetches in %s under %d enqueues, want at most %d", n, elapsed.Round(time.Millisecond), enqueues, limit)
	}
}

// TestPushFetchFailuresLoggedOncePerOutage: a push fetcher whose fetches
// keep failing warns once when they start failing and says once when they
// work again, with how many failed and for how long; the attempts in
// between are at debug level. It warned at every attempt.
func TestPushFetchFailuresLoggedOncePerOutage(t *testing.T) {
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e, st, arrived := startPushOutage(t, "sqlite", "push.outage.log", log)
	waitFor(t, "five failed fetches", func() bool { return st.fails.Load() >= 5 })
	st.down.Store(false)
	mustEnqueue(t, e, "push.outage.log", `1`)
	recvWithin(t, arrived, 10*time.Second, "the delivery after the outage")
	waitFor(t, "the recovery line", func() bool { return strings.Contains(logs.String(), "push: fetches work again") })
	out := logs.String()
	if n := strings.Count(out, "fetch failed"); n != 1 {
		t.Fatalf("%d fetch failure lines at info level or above for %d failed fetches, want 1:\n%s", n, st.fails.Load(), out)
	}
	if !strings.Contains(out, `level=WARN msg="push: fetch failed; backing off" type=push.outage.log`) {
		t.Fatalf("the first failure is not a warning naming the type:\n%s", out)
	}
	if !strings.Contains(out, `msg="push: fetches work again" type=push.outage.log failures=`) || !strings.Contains(out, " after=") {
		t.Fatalf("the recovery line does not say how many fetches failed and for how long:\n%s", out)
	}
}

// failingTypeLists is a store whose ListTypes (the pusher's reload of the
// stored targets) fails while down is set.
type failingTypeLists struct {
	store.Store
	down  atomic.Bool
	fails atomic.Int64
}

func (s *failingTypeLists) ListTypes(ctx context.Context) ([]store.TypeConfig, error) {
	if s.down.Load() {
		s.fails.Add(1)
		return nil, errors.New("list types: connection refused")
	}
	return s.Store.ListTypes(ctx)
}

// TestPushReloadFailuresLoggedOncePerOutage: a pusher whose reloads of the
// stored targets keep failing (every 5 s, and after each PutType) warns
// once when they start failing and says once when they work again; it
// warned at every reload for as long as the database was away.
func TestPushReloadFailuresLoggedOncePerOutage(t *testing.T) {
	var logs logBuffer
	st := &failingTypeLists{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	srv := target(t, func(http.ResponseWriter, *http.Request) {})
	put := func() {
		t.Helper()
		if _, err := e.PutType(context.Background(), TypeSpec{Type: "push.reload", Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
			t.Fatalf("put type: %v", err)
		}
	}
	put()
	waitFor(t, "the target to be active", func() bool { return strings.Contains(logs.String(), "push target active") })
	st.down.Store(true)
	for i := int64(1); i <= 4; i++ {
		put() // each makes the pusher reload now
		waitFor(t, "a failed reload", func() bool { return st.fails.Load() >= i })
	}
	st.down.Store(false)
	put()
	waitFor(t, "the recovery line", func() bool { return strings.Contains(logs.String(), "push: types reloaded again") })
	out := logs.String()
	if n := strings.Count(out, "reload types failed"); n != 1 {
		t.Fatalf("%d reload failure lines at info level or above for %d failed reloads, want 1:\n%s", n, st.fails.Load(), out)
	}
	if !strings.Contains(out, `msg="push: types reloaded again" failures=`) {
		t.Fatalf("the recovery line does not say how many reloads failed:\n%s", out)
	}
}
