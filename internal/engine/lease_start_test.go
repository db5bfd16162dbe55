package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// slowFirstFetch is a store whose first fetch that leases tasks answers
// only half a watchdog margin before their leases expire, as a fetch whose
// commit or answer was slow (a loaded machine or database) does.
type slowFirstFetch struct {
	outcomeLog
	margin time.Duration
	mu     sync.Mutex
	lease  string // the lease id of the slow fetch's task
}

func (s *slowFirstFetch) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if err != nil || len(ts) == 0 {
		return ts, err
	}
	s.mu.Lock()
	first := s.lease == ""
	if first {
		s.lease = ts[0].LeaseID
	}
	s.mu.Unlock()
	if first {
		time.Sleep(time.Until(ts[0].LeaseExpiresAt.Add(-s.margin / 2)))
	}
	return ts, nil
}

// TestWorkerDoesNotStartATaskWhoseLeaseIsAboutToExpire: a task whose lease
// is less than the watchdog's margin from its expiry when a handler is free
// to run it (its fetch was slow, or it waited in the prefetch buffer while
// heartbeats failed) is not started: its lease is given back, and the task
// runs under a new lease. Before, the handler started with its context
// live, the lease running out under it until the watchdog's next pass (on
// a loaded machine, handlers ran with live contexts hundreds of
// milliseconds past their leases' expiries, when the reaper may hand the
// task to another worker).
func TestWorkerDoesNotStartATaskWhoseLeaseIsAboutToExpire(t *testing.T) {
	const lease = time.Second
	margin := watchdogMargin(lease)
	st := &slowFirstFetch{outcomeLog: outcomeLog{Store: openWorkerStoreOn(t, "sqlite")}, margin: margin}
	// The scheduler reaps the lease if its give-back comes too late.
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease})
	type run struct {
		task store.Task
		at   time.Time
	}
	runs := make(chan run, 16)
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(_ context.Context, tk *store.Task) error {
			runs <- run{task: *tk, at: time.Now()}
			return nil
		}})
	id := mustEnqueue(t, e, "x", `1`)
	waitTask(t, e, id, "the task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	st.mu.Lock()
	slow := st.lease
	st.mu.Unlock()
	for len(runs) > 0 {
		r := <-runs
		if stopAt := r.task.LeaseExpiresAt.Add(-margin); !r.at.Before(stopAt) {
			t.Errorf("handler started at %s under lease %s (slow fetch: %v), less than the watchdog's margin (%v) before its expiry %s",
				r.at.Format(time.StampMicro), r.task.LeaseID, r.task.LeaseID == slow, margin, r.task.LeaseExpiresAt.Format(time.StampMicro))
		}
	}
	for _, o := range st.of(id) {
		if o.LeaseID == slow && o.State != store.StatePending {
			t.Errorf("outcome %s sent under the lease that was about to expire when its task could start", o.State)
		}
	}
}

// shortLeaseType is a store that tells the engine the first lease of the
// given type expires half a watchdog margin after its fetch (the store
// keeps the real one), as a fetch answered late would, and whose
// heartbeats fail while that lease is held.
type shortLeaseType struct {
	outcomeLog
	typ    string
	margin time.Duration
	mu     sync.Mutex
	lease  string // the first such lease
}

func (s *shortLeaseType) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ts {
		if ts[i].Type == s.typ && s.lease == "" {
			s.lease = ts[i].LeaseID
			ts[i].LeaseExpiresAt = p.Now.Add(s.margin / 2)
		}
	}
	return ts, err
}

// ExtendLeases fails while the short lease is among the leases to extend,
// as heartbeats do against a slow database: the watchdog must stop it
// whatever the order of its pass and the heartbeat's.
func (s *shortLeaseType) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	s.mu.Lock()
	id := s.lease
	s.mu.Unlock()
	for _, l := range p.Leases {
		if id != "" && l.LeaseID == id {
			return nil, errors.New("heartbeat failed (test)")
		}
	}
	return s.Store.ExtendLeases(ctx, p)
}

// stopped reports whether e's watchdog marked the first short lease lost.
func (s *shortLeaseType) stopped(e *Engine) bool {
	s.mu.Lock()
	id := s.lease
	s.mu.Unlock()
	e.leases.mu.Lock()
	defer e.leases.mu.Unlock()
	for _, h := range e.leases.m {
		if id != "" && h.leaseID == id {
			return h.lost
		}
	}
	return false
}

// TestPrefetchedTaskStoppedByTheWatchdogIsGivenBack: a task waiting in the
// prefetch buffer whose lease the watchdog stops (about to expire without
// a heartbeat) is given back when its turn comes, the attempt not counted,
// as one found about to expire at start is. It was skipped, its lease
// left to run out and the reaper to count an attempt that never ran.
func TestPrefetchedTaskStoppedByTheWatchdogIsGivenBack(t *testing.T) {
	const lease = time.Second
	st := &shortLeaseType{outcomeLog: outcomeLog{Store: openWorkerStoreOn(t, "sqlite")}, typ: "x.b", margin: watchdogMargin(lease)}
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease})
	started := make(chan string, 16)
	var sawStop atomic.Bool
	runWorker(t, e, WorkerConfig{Types: []string{"x.a", "x.b"}, Concurrency: 1, Prefetch: 4, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(_ context.Context, tk *store.Task) error {
			started <- tk.Type
			if tk.Type == "x.a" {
				// Hold the only handler until the watchdog has stopped
				// the prefetched x.b's lease.
				for deadline := time.Now().Add(10 * time.Second); !st.stopped(e) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				sawStop.Store(st.stopped(e))
			}
			return nil
		}})
	a := mustEnqueue(t, e, "x.a", `1`)
	if typ := recvWithin(t, started, 10*time.Second, "x.a's start"); typ != "x.a" {
		t.Fatalf("first start %s, want x.a", typ)
	}
	b := mustEnqueue(t, e, "x.b", `1`)
	waitTask(t, e, a, "x.a to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if !sawStop.Load() {
		t.Fatal("the watchdog did not stop the prefetched lease while x.a ran")
	}
	tk := waitTask(t, e, b, "x.b to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if tk.Attempt != 1 {
		t.Errorf("x.b succeeded at attempt %d, want 1: the stopped lease's attempt was counted", tk.Attempt)
	}
	st.mu.Lock()
	first := st.lease
	st.mu.Unlock()
	var back bool
	for _, o := range st.of(b) {
		back = back || (o.LeaseID == first && o.State == store.StatePending)
	}
	if !back {
		t.Error("the lease the watchdog stopped in the prefetch buffer was not given back")
	}
}
