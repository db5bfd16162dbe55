package retryq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestDirectDispatch: tasks enqueued in process while a local worker has
// idle handlers are leased at insert and run exactly once each, without a
// fetch; the history looks like any other attempt.
func TestDirectDispatch(t *testing.T) { backendtest.Run(t, testDirectDispatch) }

func testDirectDispatch(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	var mu sync.Mutex
	calls := map[string]int{}
	e.mux.HandleFunc("direct", func(ctx context.Context, task *retryq.Task) error {
		mu.Lock()
		calls[task.ID]++
		mu.Unlock()
		return nil
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 8, ID: "local"})
	// Let the worker's first (empty) fetch mark it idle.
	waitFor(t, 5*time.Second, "the worker's first fetch", func() bool { return e.client.Counters().Fetches > 0 })
	ctx := context.Background()
	var ids []string
	var idsMu sync.Mutex
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				r, err := e.client.Enqueue(ctx, "direct", map[string]int{"i": i})
				if err != nil {
					t.Error(err)
					return
				}
				idsMu.Lock()
				ids = append(ids, r.Task.ID)
				idsMu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		e.waitState(id, 10*time.Second, store.StateSucceeded)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if calls[id] != 1 {
			t.Fatalf("task %s ran %d times", id, calls[id])
		}
	}
	c := e.client.Counters()
	if c.Dispatched == 0 {
		t.Fatalf("no task was dispatched at insert: %+v", c)
	}
	hist, err := e.client.Attempts(ctx, ids[0])
	if err != nil || len(hist) != 1 || hist[0].Number != 1 || hist[0].Outcome != store.OutcomeSucceeded || hist[0].StartedAt.IsZero() {
		t.Fatalf("history of a dispatched task: %+v %v", hist, err)
	}
	t.Logf("%d of %d tasks dispatched at insert, %d fetched", c.Dispatched, len(ids), c.Fetched)
}
