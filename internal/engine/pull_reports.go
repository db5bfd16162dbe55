package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// Tuning of the wait for pull workers' reports (AwaitPullReports).
const (
	// pullCheckEvery is how often the wait asks the store about the
	// leases still out: one reported through another node, cancelled,
	// reaped or heartbeated elsewhere is not seen here otherwise.
	pullCheckEvery = 500 * time.Millisecond
	// pullChecksPerRound bounds the store reads of one such round.
	pullChecksPerRound = 100
	// pullPruneEvery is how often Lease drops the entries of leases whose
	// known expiry has passed (a worker that vanished), so that the
	// table stays as small as the leases out.
	pullPruneEvery = time.Minute
)

// pullLeases are the leases this node handed to pull workers (Lease) and
// has not seen reported (Complete, Fail), released (ReleaseLeased) or
// refused as lost. A node that stops keeps taking their reports for a
// while: AwaitPullReports waits until none is left.
type pullLeases struct {
	mu sync.Mutex
	m  map[string]pullLease // by task id
	// emptied is closed, and set to nil, when m becomes empty while
	// AwaitPullReports waits on it.
	emptied   chan struct{}
	lastPrune time.Time
}

// pullLease is a lease handed out and when it ends, as last known here.
type pullLease struct {
	leaseID string
	expires time.Time
}

// add records the leases of tasks handed out at now, and once every
// pullPruneEvery drops the entries whose known expiry has passed.
func (pl *pullLeases) add(tasks []store.Task, now time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.m == nil {
		pl.m = make(map[string]pullLease)
	}
	for i := range tasks {
		pl.m[tasks[i].ID] = pullLease{leaseID: tasks[i].LeaseID, expires: tasks[i].LeaseExpiresAt}
	}
	if now.Sub(pl.lastPrune) < pullPruneEvery && pl.lastPrune.Sub(now) < pullPruneEvery {
		return
	}
	pl.lastPrune = now
	pl.pruneLocked(now)
}

// pruneLocked drops the leases whose known expiry is before now: their
// workers are gone, or heartbeat through another node. pl.mu is held.
func (pl *pullLeases) pruneLocked(now time.Time) {
	for id, l := range pl.m {
		if l.expires.Before(now) {
			pl.dropLocked(id, l.leaseID)
		}
	}
}

// extended records a lease's new expiry, if the lease is one handed out here.
func (pl *pullLeases) extended(taskID, leaseID string, expires time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if l, ok := pl.m[taskID]; ok && l.leaseID == leaseID {
		l.expires = expires
		pl.m[taskID] = l
	}
}

// drop forgets a lease: it was reported, released or found gone.
func (pl *pullLeases) drop(taskID, leaseID string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.dropLocked(taskID, leaseID)
}

// dropTasks forgets the leases of tasks: they were given back.
func (pl *pullLeases) dropTasks(tasks []store.Task) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for i := range tasks {
		pl.dropLocked(tasks[i].ID, tasks[i].LeaseID)
	}
}

func (pl *pullLeases) dropLocked(taskID, leaseID string) {
	if l, ok := pl.m[taskID]; !ok || l.leaseID != leaseID {
		return
	}
	delete(pl.m, taskID)
	if len(pl.m) == 0 && pl.emptied != nil {
		close(pl.emptied)
		pl.emptied = nil
	}
}

// waitable returns how many leases are out at now (expired ones are
// dropped) and, when some are, a channel closed once none is.
func (pl *pullLeases) waitable(now time.Time) (int, <-chan struct{}) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.pruneLocked(now)
	n := len(pl.m)
	if n == 0 {
		return 0, nil
	}
	if pl.emptied == nil {
		pl.emptied = make(chan struct{})
	}
	return n, pl.emptied
}

// sample returns up to n of the leases out at now.
func (pl *pullLeases) sample(n int, now time.Time) map[string]string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.pruneLocked(now)
	out := make(map[string]string, min(n, len(pl.m)))
	for id, l := range pl.m {
		if len(out) == n {
			break
		}
		out[id] = l.leaseID
	}
	return out
}

// PullLeasesOut returns how many leases this node handed to pull workers
// (Lease) are still out as far as it knows: not reported to it, released
// or found lost, and not past their last known expiry.
func (e *Engine) PullLeasesOut() int {
	n, _ := e.pulled.waitable(e.now())
	return n
}

// AwaitPullReports waits until no lease this node handed to pull workers
// is out, or ctx ends, and returns how many are still out then. A node
// that stops calls it between BeginShutdown and closing its API, so that
// the workers running its tasks can still complete, fail or heartbeat
// them. A lease leaves the count when it is reported here (Complete,
// Fail), when its last known expiry passes, or when the store, asked
// every pullCheckEvery, no longer holds it: reported through another
// node, cancelled, expired or reaped. The wait ends early, logging why,
// when every lease a round asked the store about failed with
// store.ErrUnavailable: no report can commit while the database is away,
// and the leases come back to other workers as they expire.
func (e *Engine) AwaitPullReports(ctx context.Context) int {
	for {
		err := e.checkPullLeases(ctx)
		n, emptied := e.pulled.waitable(e.now())
		if n == 0 {
			return 0
		}
		if err != nil {
			e.log.Warn("pull reports: the database is unavailable; waiting no longer for reports that cannot commit",
				"leases", n, "err", err)
			return n
		}
		t := time.NewTimer(pullCheckEvery)
		select {
		case <-emptied:
			t.Stop()
			return 0
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			n, _ := e.pulled.waitable(e.now())
			return n
		}
	}
}

// checkPullLeases forgets up to pullChecksPerRound leases out that the
// store no longer holds (the task is not running under that lease, or
// the lease has expired), and takes the expiry of those it holds. It
// returns the store's error when every lease it asked about failed with
// store.ErrUnavailable, and nil otherwise.
func (e *Engine) checkPullLeases(ctx context.Context) error {
	var down error
	asked, unavailable := 0, 0
	for id, leaseID := range e.pulled.sample(pullChecksPerRound, e.now()) {
		if ctx.Err() != nil {
			return nil
		}
		asked++
		t, err := e.st.GetTask(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			e.pulled.drop(id, leaseID)
		case errors.Is(err, store.ErrUnavailable):
			unavailable++
			down = err
		case err != nil: // asked again next round
		case t.State != store.StateRunning || t.LeaseID != leaseID || e.now().After(t.LeaseExpiresAt):
			e.pulled.drop(id, leaseID)
		default:
			e.pulled.extended(id, leaseID, t.LeaseExpiresAt)
		}
	}
	if asked > 0 && unavailable == asked {
		return fmt.Errorf("check pull leases: %w", down)
	}
	return nil
}
