package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestOutcomesCounterSkipsRefused: Counters.Outcomes counts the outcomes
// the store recorded; one it refused because the lease was gone (the task
// cancelled behind the worker's back) is counted in LeaseLost only, as
// Inserted leaves out the duplicates an enqueue did not insert.
func TestOutcomesCounterSkipsRefused(t *testing.T) {
	backendtest.Run(t, testOutcomesCounterSkipsRefused)
}

// cancelBeforeOutcome is a store that cancels a task (in the store, behind
// the engine's back) just before the outcome of its attempt is recorded,
// so that the outcome is refused whatever the engine learns of the
// cancellation afterwards (on PostgreSQL its notification would otherwise
// race the handler's return, and a handler told first records nothing).
type cancelBeforeOutcome struct {
	store.Store
	id string
}

func (s *cancelBeforeOutcome) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	for _, o := range p.Outcomes {
		if o.TaskID == s.id && o.State == store.StateSucceeded {
			if _, err := s.Store.CancelTask(ctx, store.CancelParams{ID: s.id, Now: p.Now}); err != nil {
				return nil, err
			}
		}
	}
	return s.Store.RecordOutcomes(ctx, p)
}

func testOutcomesCounterSkipsRefused(t *testing.T, backend string) {
	st := &cancelBeforeOutcome{Store: openWorkerStoreOn(t, backend), id: "t_refused"}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	started := make(chan string, 1)
	release := make(chan struct{})
	runWorker(t, e, WorkerConfig{Types: []string{"a"}, Concurrency: 1, Handle: func(ctx context.Context, tk *store.Task) error {
		started <- tk.ID
		<-release
		return nil
	}})
	if _, err := st.InsertTasks(context.Background(), store.InsertParams{Now: time.Now(),
		Tasks: []store.NewTask{{ID: st.id, Type: "a", Payload: []byte(`{}`), MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	if id := recvWithin(t, started, 10*time.Second, "the handler to start"); id != st.id {
		t.Fatalf("handler started %s, want %s", id, st.id)
	}
	before := e.Counters()
	close(release)
	waitFor(t, "the refused outcome to be counted", func() bool { return e.Counters().LeaseLost > before.LeaseLost })
	after := e.Counters()
	if after.Outcomes != before.Outcomes || after.Succeeded != before.Succeeded {
		t.Fatalf("Outcomes %d -> %d, Succeeded %d -> %d for an outcome the store refused; want both unchanged",
			before.Outcomes, after.Outcomes, before.Succeeded, after.Succeeded)
	}
}
