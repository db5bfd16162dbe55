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

func testOutcomesCounterSkipsRefused(t *testing.T, backend string) {
	st := openWorkerStoreOn(t, backend)
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	started := make(chan string, 1)
	release := make(chan struct{})
	runWorker(t, e, WorkerConfig{Types: []string{"a"}, Concurrency: 1, Handle: func(ctx context.Context, tk *store.Task) error {
		started <- tk.ID
		<-release
		return nil
	}})
	id := mustEnqueue(t, e, "a", `{}`)
	recvWithin(t, started, 10*time.Second, "the handler to start")
	before := e.Counters()
	// Cancelled in the store directly: the engine's lease tracker does not
	// know, so the handler's success is submitted and refused.
	if _, err := st.CancelTask(context.Background(), store.CancelParams{ID: id, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, "the refused outcome to be counted", func() bool { return e.Counters().LeaseLost > before.LeaseLost })
	after := e.Counters()
	if after.Outcomes != before.Outcomes || after.Succeeded != before.Succeeded {
		t.Fatalf("Outcomes %d -> %d, Succeeded %d -> %d for an outcome the store refused; want both unchanged",
			before.Outcomes, after.Outcomes, before.Succeeded, after.Succeeded)
	}
}
