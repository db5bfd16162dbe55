package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// insertLostAfterCommit is a store whose first InsertTasks call that
// leases a task at insert commits and then fails as a connection lost
// before the answer came back would (store.ErrUnavailable).
type insertLostAfterCommit struct {
	store.Store
	lost atomic.Bool
}

func (s *insertLostAfterCommit) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	res, err := s.Store.InsertTasks(ctx, p)
	if err == nil && len(p.Tasks) == 1 && p.Tasks[0].Lease != nil && s.lost.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("insert tasks: %w: connection reset after the commit", store.ErrUnavailable)
	}
	return res, err
}

// TestDirectDispatchReleasesAfterAnAmbiguousInsert: when the insert that
// leased a task to an idle local worker fails in a way that may have
// followed its commit, the worker's slot is given back and the lease taken
// at insert is released, so a task that was inserted after all is pending
// (and runs, its attempt not counted) instead of sitting running under a
// lease nobody holds until the reaper counts the attempt that never ran as
// lost (dead at once with max_attempts 1).
func TestDirectDispatchReleasesAfterAnAmbiguousInsert(t *testing.T) {
	backendtest.Run(t, testDirectDispatchReleasesAfterAnAmbiguousInsert)
}

func testDirectDispatchReleasesAfterAnAmbiguousInsert(t *testing.T, backend string) {
	st := &insertLostAfterCommit{Store: openWorkerStoreOn(t, backend)}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	ran := make(chan string, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 1, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
		ran <- tk.ID
		return nil
	}})
	w := drainedLocalWorker(t, e, "q")
	_, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "q", Payload: []byte(`1`), MaxAttempts: 1})
	if !errors.Is(err, store.ErrUnavailable) || !st.lost.Load() {
		t.Fatalf("enqueue: %v; want the store's ambiguous failure", err)
	}
	id := recvWithin(t, ran, 10*time.Second, "the task inserted after all to run")
	tk := waitTask(t, e, id, "the task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if tk.Attempt != 1 {
		t.Fatalf("attempt %d, want 1", tk.Attempt)
	}
	waitFor(t, "the worker's slot to be free", func() bool { return w.inFlight.Load() == 0 })
}
