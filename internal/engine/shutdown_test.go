package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// stuckOutcomes is a store whose RecordOutcomes hangs (honouring its
// context), as on a silently dropped connection or a row lock: the case the
// heartbeat path is bounded for (heartbeatLoop, leaseWatchdog).
type stuckOutcomes struct {
	store.Store
	called  chan struct{}
	release chan struct{}
}

func (s *stuckOutcomes) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	select {
	case s.called <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.release:
		return s.Store.RecordOutcomes(ctx, p)
	}
}

// A worker asked to stop must return even when the outcome commit hangs:
// commitOutcomes gives up after the lease duration (300 ms here), after
// which the outcome could not be accepted anyway. Before, it waited for the
// store with no deadline and RunWorker never returned.
func TestWorkerShutdownDoesNotHangOnStuckOutcomeCommit(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := &stuckOutcomes{Store: openWorkerStoreOn(t, "sqlite"), called: make(chan struct{}, 1), release: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	var once sync.Once
	unstick := func() { once.Do(func() { close(st.release) }) }
	t.Cleanup(unstick) // before the engine is closed
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.RunWorker(ctx, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
			Handle: func(context.Context, *store.Task) error { return nil }})
	}()
	mustEnqueue(t, e, "x", `1`)
	recvWithin(t, st.called, 10*time.Second, "the outcome commit to start")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("RunWorker still blocked 5s after its context was cancelled (lease %v, grace 50ms): shutdown waits forever for an outcome commit that hangs", lease)
		unstick()
		<-done
	}
}

// TestCloseStopsRunningWorkers: Close with a worker still running (its
// context never cancelled, as with `defer client.Close()` around `go
// w.Run(ctx)`) stops the worker first: a handler that is running finishes
// within the grace and its outcome is recorded, RunWorker returns, no task
// is left leased, and a worker started afterwards is refused.
func TestCloseStopsRunningWorkers(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	e, err := New(Config{Store: st, NodeID: "close-test", PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	started, finish := make(chan string, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.RunWorker(context.Background(), WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 5 * time.Second,
			Handle: func(ctx context.Context, tk *store.Task) error {
				started <- tk.ID
				<-finish
				return nil
			}})
	}()
	id := mustEnqueue(t, e, "x", `1`)
	recvWithin(t, started, 10*time.Second, "the handler to start")
	closed := make(chan struct{})
	go func() {
		_ = e.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a handler still ran")
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWorker: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunWorker still running 10s after Close")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still blocked 10s after its worker stopped")
	}
	tk, err := st.GetTask(context.Background(), id)
	if err != nil || tk.State != store.StateSucceeded {
		t.Fatalf("task after Close: %v %v, want succeeded", tk.State, err)
	}
	err = e.RunWorker(context.Background(), WorkerConfig{Types: []string{"x"}, Handle: func(context.Context, *store.Task) error { return nil }})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("RunWorker after Close = %v, want ErrClosed", err)
	}
}
