package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// failedFetches counts the store's FetchTasks calls that fail.
type failedFetches struct {
	store.Store
	fails atomic.Int64
}

func (s *failedFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if err != nil {
		s.fails.Add(1)
	}
	return ts, err
}

// TestWorkerFetchesAtOnceAfterPostgresIsBack: with PostgreSQL stopped
// (on a cluster of the test's own) long enough for ten fetches in a row
// to fail, a task enqueued once it is back starts within a fraction of a
// second. The worker slept 5 s after its tenth failure whatever happened
// meanwhile.
func TestWorkerFetchesAtOnceAfterPostgresIsBack(t *testing.T) {
	c := pgtest.NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := postgres.Open(ctx, postgres.Config{URL: c.NewDatabase(t), AutoMigrate: true, MaxConns: 6, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	st := &failedFetches{Store: pg}
	// The idle worker polls: its fetches meet the outage.
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: 50 * time.Millisecond})
	started := startedAt(t, e, "outage.pg")
	first := mustEnqueue(t, e, "outage.pg", `1`)
	recvWithin(t, started, 10*time.Second, "the first handler to start")
	waitTask(t, e, first, "the first task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ten failed fetches", func() bool { return st.fails.Load() >= 10 })
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var enqueued time.Time
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "outage.pg", Payload: []byte(`2`)})
		if err == nil {
			enqueued = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("enqueue after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	at := recvWithin(t, started, 10*time.Second, "the handler to start after the outage")
	if d := at.Sub(enqueued); d > 600*time.Millisecond {
		t.Fatalf("the task started %s after its enqueue, after %d failed fetches", d, st.fails.Load())
	}
}
