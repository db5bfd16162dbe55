package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestDirectDispatchSkipsRepeatsOfAKeyInOneCommit: when two enqueues of one
// commit carry the same idempotency key, the later one is the earlier
// one's duplicate and is never inserted, so an idle handler is offered to
// the earlier one, whatever their priorities. Before, the later one, of
// higher priority, took the only idle handler's slot, which its duplicate
// result then gave back: the task that was inserted waited pending for a
// fetch instead of being leased at insert.
func TestDirectDispatchSkipsRepeatsOfAKeyInOneCommit(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, backendtest.SQLite), Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 1, Prefetch: -1, Handle: func(context.Context, *store.Task) error {
		return nil
	}})
	drainedLocalWorker(t, e, "q")
	now := e.now()
	nts := []store.NewTask{
		{ID: NewID(now), Type: "q", Payload: json.RawMessage(`"first"`), Priority: 0, IdempotencyKey: "k"},
		{ID: NewID(now), Type: "q", Payload: json.RawMessage(`"repeat"`), Priority: 10, IdempotencyKey: "k"},
	}
	res, errs, err := e.insertGroup(context.Background(), nts)
	if err != nil || errs != nil {
		t.Fatalf("insertGroup: %v, %v", err, errs)
	}
	if res[1].Task.ID != res[0].Task.ID || !res[1].Duplicate {
		t.Fatalf("results %s and %s (duplicate %v), want the second a duplicate of the first", res[0].Task.ID, res[1].Task.ID, res[1].Duplicate)
	}
	if res[0].Task.State != store.StateRunning {
		t.Fatalf("the inserted task is %s, want leased at insert to the idle handler", res[0].Task.State)
	}
	waitTask(t, e, res[0].Task.ID, "the task to run", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
}
