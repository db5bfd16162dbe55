package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// stuckExtends is a store whose ExtendLeases hangs, as on a pool wait, a
// row lock or a silently dropped connection. With honourCtx it returns when
// its context ends; without, only when the test releases it.
type stuckExtends struct {
	outcomeLog
	honourCtx bool
	release   chan struct{}
	returned  chan time.Duration // after each call: how long it lasted
}

func newStuckExtends(t *testing.T, honourCtx bool) *stuckExtends {
	s := &stuckExtends{outcomeLog: outcomeLog{Store: openWorkerStoreOn(t, "sqlite")}, honourCtx: honourCtx,
		release: make(chan struct{}), returned: make(chan time.Duration, 64)}
	return s
}

func (s *stuckExtends) ExtendLeases(ctx context.Context, _ store.ExtendParams) ([]error, error) {
	start := time.Now()
	var err error
	if s.honourCtx {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.release:
			err = errors.New("released by the test")
		}
	} else {
		<-s.release
		err = errors.New("released by the test")
	}
	select {
	case s.returned <- time.Since(start):
	default:
	}
	return nil, err
}

// TestHeartbeatCallIsBounded: a heartbeat whose store call hangs gives up
// after the heartbeat interval instead of waiting forever (and with it every
// later heartbeat).
func TestHeartbeatCallIsBounded(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := newStuckExtends(t, true)
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	t.Cleanup(func() { close(st.release) }) // runs before the engine is closed
	started := make(chan struct{}, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(ctx context.Context, _ *store.Task) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}})
	mustEnqueue(t, e, "x", `1`)
	recvWithin(t, started, 10*time.Second, "the handler to start")
	took := recvWithin(t, st.returned, 20*lease, "a hung heartbeat call to give up")
	if took > lease {
		t.Errorf("a hung heartbeat call lasted %v, longer than the lease (%v)", took, lease)
	}
}

// TestLeaseWatchdogStopsHandlerWhenHeartbeatHangs: when heartbeats cannot reach
// the store (here the call hangs and ignores its context), a running
// handler is cancelled once its lease, as last granted or extended, has
// expired (another worker may be given the task from then on), not before,
// and no outcome is sent under the lost lease.
func TestLeaseWatchdogStopsHandlerWhenHeartbeatHangs(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := newStuckExtends(t, false)
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	t.Cleanup(func() { close(st.release) }) // runs before the engine is closed
	type stop struct {
		task  store.Task
		at    time.Time
		cause error
	}
	stopped := make(chan stop, 1)
	w := runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(ctx context.Context, tk *store.Task) error {
			select {
			case <-ctx.Done():
				stopped <- stop{task: *tk, at: time.Now(), cause: context.Cause(ctx)}
				return ctx.Err()
			case <-time.After(time.Minute):
				return nil
			}
		}})
	id := mustEnqueue(t, e, "x", `1`)
	got := recvWithin(t, stopped, 20*lease, "the handler to be cancelled")
	if !errors.Is(got.cause, errLeaseLost) {
		t.Errorf("handler cancelled by %v, want %v", got.cause, errLeaseLost)
	}
	if got.at.Before(got.task.LeaseExpiresAt) {
		t.Errorf("handler cancelled at %v, before its lease expired (%v)", got.at, got.task.LeaseExpiresAt)
	}
	if late := got.at.Sub(got.task.LeaseExpiresAt); late > 5*lease {
		t.Errorf("handler cancelled %v after its lease expired", late)
	}
	w.stop() // every outcome is committed when RunWorker returns
	for _, o := range st.of(id) {
		if o.LeaseID == got.task.LeaseID {
			t.Errorf("outcome %s sent under the lost lease", o.State)
		}
	}
	if tk := mustGet(t, e, id); tk.State != store.StateRunning || tk.LeaseID != got.task.LeaseID {
		t.Errorf("task: state %s lease %s, want still running under the expired lease (for the reaper)", tk.State, tk.LeaseID)
	}
}
