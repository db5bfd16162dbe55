package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// The call gives up after the interval (1 s); the lease (3 s) it is
	// checked against leaves a loaded machine's late timers room.
	const lease = 3 * time.Second
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
// handler is cancelled a margin (a tenth of the lease) before its lease,
// as last granted or extended, expires, not earlier: it has stopped by the
// time the reaper may give the task to another worker. Its failure is not
// recorded; its lease, still valid, is given back, so the task runs again
// at once, the cut attempt not counted. Before, the handler was cancelled
// only once the lease had expired, when another node's reaper, on time,
// could already have handed the task to another worker.
func TestLeaseWatchdogStopsHandlerWhenHeartbeatHangs(t *testing.T) {
	// The margin (300ms) leaves a loaded machine's watchdog timer room to
	// fire late and still stop the handler before the expiry.
	const lease = 3 * time.Second
	st := newStuckExtends(t, false)
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	t.Cleanup(func() { close(st.release) }) // runs before the engine is closed
	type stop struct {
		task  store.Task
		at    time.Time
		cause error
	}
	stopped := make(chan stop, 1)
	var runs atomic.Int32
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(ctx context.Context, tk *store.Task) error {
			if runs.Add(1) > 1 {
				return nil
			}
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
	if !errors.Is(got.cause, ErrLeaseExpired) {
		t.Errorf("handler cancelled by %v, want %v", got.cause, ErrLeaseExpired)
	}
	margin := watchdogMargin(lease)
	if early := got.task.LeaseExpiresAt.Sub(got.at); early > margin {
		t.Errorf("handler cancelled %v before its lease expired, more than the margin %v", early, margin)
	}
	if !got.at.Before(got.task.LeaseExpiresAt) {
		t.Errorf("handler cancelled at %v, not before its lease expired (%v)", got.at, got.task.LeaseExpiresAt)
	}
	done := waitTask(t, e, id, "the task to run again and succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if done.Attempt != got.task.Attempt {
		t.Errorf("task succeeded at attempt %d; want %d (the cut attempt given back, not counted)", done.Attempt, got.task.Attempt)
	}
	for _, o := range st.of(id) {
		// The cut attempt's own outcome is never sent, only its release.
		if o.LeaseID == got.task.LeaseID && o.State != store.StatePending {
			t.Errorf("outcome %s sent under the lease the watchdog gave up", o.State)
		}
	}
}

// outageExtends is a store whose heartbeats fail with ErrUnavailable for a
// while (a database restarting or failing over): once a heartbeat of the
// task watched has succeeded, every call in the span d starting with the
// next call fails. calls receives each call's time and whether it failed.
type outageExtends struct {
	outcomeLog
	d     time.Duration
	mu    sync.Mutex
	armed bool
	from  time.Time // the outage's start; zero until it began
	calls chan outageCall
}

type outageCall struct {
	at     time.Time
	failed bool
	after  bool // the first call after the outage
}

func (s *outageExtends) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	now := time.Now()
	s.mu.Lock()
	armed, from := s.armed, s.from
	if armed && from.IsZero() {
		s.from, from = now, now
	}
	failing := armed && now.Sub(from) < s.d
	s.mu.Unlock()
	if failing {
		s.calls <- outageCall{at: now, failed: true}
		return nil, fmt.Errorf("extend leases: %w", store.ErrUnavailable)
	}
	errs, err := s.Store.ExtendLeases(ctx, p)
	if armed {
		s.mu.Lock()
		first := !s.from.IsZero() && s.d > 0
		s.d = 0 // report the first call after the outage once
		s.mu.Unlock()
		if first {
			s.calls <- outageCall{at: now, after: true}
		}
		return errs, err
	}
	if err == nil && len(errs) > 0 && errs[0] == nil {
		s.mu.Lock()
		s.armed = true
		s.mu.Unlock()
	}
	return errs, err
}

// TestHeartbeatRetriedSoonAfterTransientFailure: a heartbeat that fails
// because the database is briefly away is tried again well before the
// leases it carried run out, not only a whole heartbeat interval later. A
// database away for 40% of the lease, from a heartbeat interval after a
// heartbeat (the watchdog's margin, a tenth of the lease, leaves a loaded
// machine about as much room again), then costs no running attempt: before, the two heartbeats of the outage both failed,
// the next came at the lease's expiry instant, and the watchdog stopped the
// handler (its attempt later counted as a lease expiry by the reaper).
func TestHeartbeatRetriedSoonAfterTransientFailure(t *testing.T) {
	const lease = 900 * time.Millisecond
	const outage = lease * 2 / 5
	interval := lease / 3
	st := &outageExtends{outcomeLog: outcomeLog{Store: openWorkerStoreOn(t, "sqlite")}, d: outage,
		calls: make(chan outageCall, 1024)}
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	started, finish := make(chan struct{}, 1), make(chan struct{})
	stopped := make(chan error, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(ctx context.Context, _ *store.Task) error {
			started <- struct{}{}
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				stopped <- context.Cause(ctx)
				return ctx.Err()
			}
		}})
	id := mustEnqueue(t, e, "x", `1`)
	recvWithin(t, started, 10*time.Second, "the handler to start")
	first := recvWithin(t, st.calls, 10*lease, "the outage's first failed heartbeat")
	var next outageCall
	for i := 0; i < 1000; i++ { // bounded: the outage lasts 40% of the lease
		c := recvWithin(t, st.calls, 10*lease, "a heartbeat after the outage began")
		if i == 0 {
			if gap := c.at.Sub(first.at); gap >= interval/2 {
				t.Errorf("a failed heartbeat was tried again only %v later (heartbeat interval %v)", gap, interval)
			}
		}
		if c.after {
			next = c
			break
		}
	}
	if next.at.IsZero() {
		t.Fatal("no heartbeat after the outage")
	}
	close(finish)
	deadline := time.Now().Add(10 * time.Second)
	for mustGet(t, e, id).State != store.StateSucceeded {
		select {
		case cause := <-stopped:
			t.Fatalf("handler stopped (%v) although the database was away for only %v of its %v lease", cause, outage, lease)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not succeeded 10s after its handler returned: %s", mustGet(t, e, id).State)
		}
	}
}

// lateExtends is a store whose first heartbeat after arm is closed commits
// late: it waits until the test lets it go (the watchdog has stopped the
// handler meanwhile), then extends the leases as of the time it was sent,
// whatever its caller's context says, as a call that commits after its
// caller gave up does. committed is closed after that. extended is closed
// after the first heartbeat that extended a lease.
type lateExtends struct {
	outcomeLog
	arm, letGo, committed, extended chan struct{}
	once, extendedOnce              sync.Once
}

func (s *lateExtends) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	select {
	case <-s.arm:
	default:
		errs, err := s.Store.ExtendLeases(ctx, p)
		if err == nil && len(errs) > 0 && errs[0] == nil {
			s.extendedOnce.Do(func() { close(s.extended) })
		}
		return errs, err
	}
	late := false
	s.once.Do(func() { late = true })
	if !late {
		return s.Store.ExtendLeases(ctx, p)
	}
	<-s.letGo
	errs, err := s.Store.ExtendLeases(context.WithoutCancel(ctx), p)
	close(s.committed)
	return errs, err
}

// TestWatchdogStopGivesBackALeaseALateHeartbeatKept: when the watchdog
// stops a handler as its lease's expiry nears while a heartbeat sent
// before the expiry is still on its way, and that heartbeat then commits,
// the lease is current in the store although the handler is gone. The worker gives
// the task back (pending, the attempt not counted) so that it runs again
// at once; before, it dropped the task, which then sat running under the
// extended lease that nobody held until the reaper counted the cut attempt
// as a lease expiry.
func TestWatchdogStopGivesBackALeaseALateHeartbeatKept(t *testing.T) {
	// The late heartbeat's expiry is a heartbeat interval (a third of the
	// lease) after the one the watchdog knew: the give-back must commit
	// within that window, so it is wide enough for a loaded machine.
	const lease = 1500 * time.Millisecond
	st := &lateExtends{outcomeLog: outcomeLog{Store: openWorkerStoreOn(t, "sqlite")},
		arm: make(chan struct{}), letGo: make(chan struct{}), committed: make(chan struct{}), extended: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	started := make(chan *store.Task, 2)
	var runs atomic.Int32
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(ctx context.Context, tk *store.Task) error {
			started <- tk
			if runs.Add(1) > 1 {
				return nil
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
				return ctx.Err()
			}
			close(st.letGo) // the late heartbeat commits while the handler stops
			<-st.committed
			return ctx.Err()
		}})
	id := mustEnqueue(t, e, "x", `1`)
	first := recvWithin(t, started, 10*time.Second, "the handler to start")
	// Armed once a heartbeat extended the lease, so that the late one is a
	// whole interval after the expiry the watchdog goes by.
	recvWithin(t, st.extended, 10*time.Second, "a heartbeat to extend the lease")
	close(st.arm)
	waitTask(t, e, id, "the task to run again and succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	got := mustGet(t, e, id)
	if got.Attempt != first.Attempt {
		t.Errorf("task succeeded at attempt %d; want %d (the cut attempt given back, not counted)", got.Attempt, first.Attempt)
	}
}
