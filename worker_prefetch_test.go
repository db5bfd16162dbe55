package retryq_test

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
)

// TestWorkerWithoutPrefetchLeavesTasksToIdleWorkers: two workers of one
// handler each and WorkerConfig.Prefetch -1 run two long tasks side by
// side; neither worker leases the second task ahead for a handler that is
// busy while the other worker idles (the default prefetch does).
func TestWorkerWithoutPrefetchLeavesTasksToIdleWorkers(t *testing.T) {
	backendtest.Run(t, testWorkerWithoutPrefetchLeavesTasksToIdleWorkers)
}

func testWorkerWithoutPrefetchLeavesTasksToIdleWorkers(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	started := make(chan string, 2)
	release := make(chan struct{})
	e.mux.HandleFunc("long", func(ctx context.Context, task *retryq.Task) error {
		started <- task.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	defer close(release)
	for _, id := range []string{"w1", "w2"} {
		e.startWorker(retryq.WorkerConfig{ID: id, Concurrency: 1, Prefetch: -1, ShutdownGrace: 10 * time.Millisecond})
	}
	// Let both workers' first (empty) fetches mark them idle.
	waitFor(t, 5*time.Second, "both workers' first fetches", func() bool { return e.client.Counters().Fetches >= 2 })
	ctx := context.Background()
	if _, err := e.client.EnqueueMany(ctx, []retryq.NewTask{{Type: "long"}, {Type: "long"}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < 2 {
		select {
		case id := <-started:
			seen[id] = true
		case <-timeout:
			ts, _, _ := e.client.List(ctx, retryq.ListParams{})
			for _, ti := range ts {
				t.Logf("task %s: %s, worker %q", ti.ID, ti.State, ti.WorkerID)
			}
			t.Fatalf("%d of 2 long tasks started on two idle workers of one handler each", len(seen))
		}
	}
}
