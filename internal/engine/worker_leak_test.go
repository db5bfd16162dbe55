package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestStoppedWorkersLeaveNoEntries runs in-process workers on types of
// their own one after the other, as a program making a worker per scope
// does, each running a task handed to it directly at its enqueue: once
// they have stopped, the engine keeps no entry for them or their types.
// The local dispatch table kept an empty list and a round-robin position
// for every type a worker had ever served.
func TestStoppedWorkersLeaveNoEntries(t *testing.T) {
	e := startWorkerEngine(t, backendtest.Open(t, backendtest.SQLite, "NORMAL"), Config{NoScheduler: true})
	for i := range 30 {
		typ := fmt.Sprintf("scope.%d", i)
		ran := make(chan struct{}, 1)
		w := runWorker(t, e, WorkerConfig{Types: []string{typ}, Concurrency: 1, Handle: func(context.Context, *store.Task) error {
			ran <- struct{}{}
			return nil
		}})
		waitFor(t, "the worker to run", e.locals.active)
		mustEnqueue(t, e, typ, `{}`)
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the task did not run")
		}
		w.stop()
	}
	e.locals.mu.Lock()
	types, positions, n := len(e.locals.byType), len(e.locals.next), e.locals.n
	e.locals.mu.Unlock()
	if types != 0 || positions != 0 || n != 0 {
		t.Errorf("after 30 workers stopped: %d types listed, %d round-robin positions, %d workers; want none", types, positions, n)
	}
	e.wake.mu.Lock()
	subs := len(e.wake.subs)
	e.wake.mu.Unlock()
	if subs != 0 {
		t.Errorf("%d wake-up subscribers left after the workers stopped", subs)
	}
}
