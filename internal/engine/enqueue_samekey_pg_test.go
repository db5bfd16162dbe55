package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestTwoNodesEnqueueingOneKeyGetOneTask: two nodes on one PostgreSQL
// database, each with a local worker for the type (so the enqueues are
// leased at insert), enqueue the same idempotency key at the same instant,
// round after round. Each round makes exactly one task: both callers are
// told that task, one of them with Duplicate set, and it runs once.
func TestTwoNodesEnqueueingOneKeyGetOneTask(t *testing.T) {
	url := pgtest.URL(t)
	var ran sync.Map // task id -> *atomic.Int64
	nodes := make([]*Engine, 2)
	for i := range nodes {
		nodes[i] = startWorkerEngine(t, openPG(t, url), Config{NodeID: fmt.Sprintf("node-%d", i), NoScheduler: i > 0})
		wctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- nodes[i].RunWorker(wctx, WorkerConfig{Types: []string{"k"}, Concurrency: 4,
				Handle: func(_ context.Context, task *store.Task) error {
					n, _ := ran.LoadOrStore(task.ID, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
					return nil
				}})
		}()
		t.Cleanup(func() { stop(); <-done })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds = 40
	for round := range rounds {
		key := fmt.Sprintf("key-%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		res := make([]store.InsertResult, len(nodes))
		errs := make([]error, len(nodes))
		for i, e := range nodes {
			wg.Go(func() {
				<-start
				res[i], errs[i] = e.Enqueue(ctx, EnqueueRequest{Type: "k", IdempotencyKey: key})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, node %d: %v", round, i, err)
			}
		}
		if res[0].Task.ID != res[1].Task.ID || res[0].Duplicate == res[1].Duplicate {
			t.Fatalf("round %d: results %s (duplicate %v) and %s (duplicate %v); want one task, one duplicate of it",
				round, res[0].Task.ID, res[0].Duplicate, res[1].Task.ID, res[1].Duplicate)
		}
	}
	waitFor(t, "every task to run", func() bool {
		n := 0
		ran.Range(func(_, _ any) bool { n++; return true })
		return n == rounds
	})
	ran.Range(func(id, n any) bool {
		if c := n.(*atomic.Int64).Load(); c != 1 {
			t.Errorf("task %s ran %d times, want once", id, c)
		}
		return true
	})
}
