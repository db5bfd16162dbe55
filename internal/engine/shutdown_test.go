package engine

import (
	"context"
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
