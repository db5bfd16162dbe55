package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// lostAfterCommit is a store whose first RecordOutcomes call commits and
// then fails as a connection lost before the answer came back would
// (store.ErrUnavailable): the engine cannot tell that the outcomes applied.
type lostAfterCommit struct {
	store.Store
	lost atomic.Bool // set once the ambiguous failure was returned
}

func (s *lostAfterCommit) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	errs, err := s.Store.RecordOutcomes(ctx, p)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("record outcomes: %w: connection reset after the commit", store.ErrUnavailable)
	}
	return errs, err
}

// TestOutcomeCommittedBeforeAnAmbiguousErrorIsNotLost: an outcome batch
// whose commit happened but whose answer was lost (the connection dropped
// after the commit) is tried again; the second try is refused by the lease
// check, as it must be (nothing is applied twice), but that refusal is the
// outcome's own first application, not a lost lease. Before, a remote
// worker's completion got ErrLeaseLost (a 409) for a task it had
// completed, and an in-process success was counted in LeaseLost instead of
// Succeeded and Outcomes.
func TestOutcomeCommittedBeforeAnAmbiguousErrorIsNotLost(t *testing.T) {
	backendtest.Run(t, testOutcomeCommittedBeforeAnAmbiguousError)
}

func testOutcomeCommittedBeforeAnAmbiguousError(t *testing.T, backend string) {
	t.Run("pull", func(t *testing.T) {
		st := &lostAfterCommit{Store: openWorkerStoreOn(t, backend)}
		e := startWorkerEngine(t, st, Config{NoScheduler: true})
		id := mustEnqueue(t, e, "amb.pull", `1`)
		ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"amb.pull"}, Max: 1, LeaseDuration: time.Minute})
		if err != nil || len(ts) != 1 {
			t.Fatalf("lease: %v, %v", ts, err)
		}
		before := e.Counters()
		if err := e.Complete(context.Background(), id, LeaseToken(&ts[0])); err != nil {
			t.Fatalf("Complete = %v; want nil: the completion committed", err)
		}
		if !st.lost.Load() {
			t.Fatal("the store's ambiguous failure was never returned")
		}
		if tk := mustGet(t, e, id); tk.State != store.StateSucceeded {
			t.Fatalf("task is %s, want succeeded", tk.State)
		}
		after := e.Counters()
		if after.Succeeded != before.Succeeded+1 || after.Outcomes != before.Outcomes+1 || after.LeaseLost != before.LeaseLost {
			t.Fatalf("Succeeded %d -> %d, Outcomes %d -> %d, LeaseLost %d -> %d; want +1, +1, unchanged",
				before.Succeeded, after.Succeeded, before.Outcomes, after.Outcomes, before.LeaseLost, after.LeaseLost)
		}
	})
	t.Run("worker", func(t *testing.T) {
		st := &lostAfterCommit{Store: openWorkerStoreOn(t, backend)}
		e := startWorkerEngine(t, st, Config{NoScheduler: true})
		runWorker(t, e, WorkerConfig{Types: []string{"amb.ok", "amb.fail"}, Concurrency: 1, Handle: func(_ context.Context, tk *store.Task) error {
			if tk.Type == "amb.fail" {
				return retry.Permanent(errors.New("no"))
			}
			return nil
		}})
		ok := mustEnqueue(t, e, "amb.ok", `1`)
		waitTask(t, e, ok, "the task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
		waitFor(t, "the outcome to be counted", func() bool { c := e.Counters(); return c.Succeeded+c.LeaseLost > 0 })
		if c := e.Counters(); c.Succeeded != 1 || c.Outcomes != 1 || c.LeaseLost != 0 {
			t.Fatalf("Succeeded %d, Outcomes %d, LeaseLost %d; want 1, 1, 0", c.Succeeded, c.Outcomes, c.LeaseLost)
		}
		// A later refusal is a lost lease again: only the tries that
		// followed an ambiguous failure are checked.
		dead := mustEnqueue(t, e, "amb.fail", `2`)
		waitTask(t, e, dead, "the task to be dead", func(tk store.Task) bool { return tk.State == store.StateDead })
		waitFor(t, "the dead letter to be counted", func() bool { return e.Counters().Dead == 1 })
		if c := e.Counters(); c.Outcomes != 2 || c.LeaseLost != 0 {
			t.Fatalf("Outcomes %d, LeaseLost %d; want 2, 0", c.Outcomes, c.LeaseLost)
		}
	})
}
