package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// quietStore hides the optional interfaces of a store (its notifications
// among them): an engine over it learns of tasks other processes insert
// only when it polls.
type quietStore struct{ store.Store }

// TestDirectDispatchDoesNotOvertakeWorkPendingElsewhere: a task another
// process made pending (another node's enqueue, whose wake-up has not
// reached this one yet, or never will on a store without notifications)
// is older and of a higher priority than the task enqueued here; an idle
// worker of its type must run it first. Before, the enqueue was leased at
// insert to the idle worker, which ran the new low-priority task ahead of
// the older one.
func TestDirectDispatchDoesNotOvertakeWorkPendingElsewhere(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, backend string) {
		st := openWorkerStoreOn(t, backend)
		e := startWorkerEngine(t, quietStore{st}, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
		var mu sync.Mutex
		var ran []string
		runWorker(t, e, WorkerConfig{Types: []string{"q", "r"}, Concurrency: 1, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
			mu.Lock()
			ran = append(ran, string(tk.Payload))
			mu.Unlock()
			return nil
		}})
		drainedLocalWorker(t, e, "q")
		// The other process's task is of the worker's other type: the
		// worker fetches both in one order.
		now := e.now()
		if _, err := st.InsertTasks(context.Background(), store.InsertParams{Now: now, Tasks: []store.NewTask{
			{ID: NewID(now), Type: "r", Payload: json.RawMessage(`"older"`), Priority: 10},
		}}); err != nil {
			t.Fatal(err)
		}
		low := 0
		res, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "q", Payload: json.RawMessage(`"newer"`), Priority: &low})
		if err != nil {
			t.Fatal(err)
		}
		if res.Task.State != store.StatePending {
			t.Errorf("the newer task is %s at insert; want pending behind the older, higher-priority one", res.Task.State)
		}
		waitFor(t, "both tasks to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ran) == 2
		})
		mu.Lock()
		defer mu.Unlock()
		if want := []string{`"older"`, `"newer"`}; !slices.Equal(ran, want) {
			t.Fatalf("ran %v; want %v", ran, want)
		}
	})
}
