package engine

import (
	"context"
	"sync"
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
