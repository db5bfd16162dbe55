package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// ErrLeaseLost is the cancellation cause (context.Cause) of a handler
// whose lease was lost: nothing it returns is recorded. It wraps
// store.ErrLeaseLost; ErrLeaseExpired and ErrTaskCancelled wrap it.
var ErrLeaseLost = fmt.Errorf("the task was reaped, cancelled or taken by another worker: %w", store.ErrLeaseLost)

// ErrLeaseExpired is the cancellation cause of a handler the lease
// watchdog stopped: its lease's last known expiry came within a tenth of
// the lease without a heartbeat extending it (as far as this process
// knows: one may still be on its way).
var ErrLeaseExpired = fmt.Errorf("lease about to expire without a heartbeat: %w", ErrLeaseLost)

// ErrTaskCancelled is the cancellation cause of a handler whose task was
// cancelled while it ran (a lost lease, told at once instead of found by
// the next heartbeat).
var ErrTaskCancelled = fmt.Errorf("task cancelled: %w", ErrLeaseLost)

// leaseTable tracks the leases held by in-process handlers so one heartbeat
// loop can extend them all in a single batch.
//
// It holds at most one lease per task: the current one. A task can come
// back into this process under a new lease while a copy under an older one
// still exists (prefetched, or running and slow to stop) after a cancel and
// retry, a reap or a release. Every operation therefore names the lease as
// well as the task and acts only when that lease is the task's current one:
// an older copy never starts, never removes the new lease's entry and
// records no outcome.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]*heldLease
	// gone remembers, for a while, leases and attempts cancelled while
	// this process held no lease of them: a lease a worker here took is
	// added to the table only after its fetch (or insert) committed, so
	// it may come in after its cancellation did.
	gone      map[string]goneLease
	lastPurge time.Time
}

// goneLease is a cancelled lease, named by its id or by its attempt (the
// attempt's number and start, in Unix microseconds as stored), and when it
// was recorded.
type goneLease struct {
	leaseID string
	attempt int
	started int64
	at      time.Time
}

// goneTTL is how long a cancelled lease is remembered: far longer than
// the moment between a fetch's commit and its tasks' entry in the table.
const goneTTL = time.Minute

type heldLease struct {
	leaseID string
	cancel  context.CancelCauseFunc // nil while the task waits in a prefetch buffer
	lost    bool                    // the lease is gone (found by a heartbeat, expired, cancelled, replaced)
	// expired is set with lost by the watchdog: the lease was about to
	// expire unextended, but a heartbeat on its way may have kept it.
	expired bool
	expires time.Time // as last granted or extended
	// attempt and started name the attempt the lease was granted for (the
	// task's attempt number and start, as stored); zero when unknown.
	attempt int
	started time.Time
	// finishing is set once the handler (or push delivery) has ended and
	// its outcome is on its way to the store: the lease is still
	// heartbeated, so that a slow commit is not overtaken by the reaper,
	// but there is nothing left to cancel or to stop.
	finishing bool
}

func newLeaseTable() *leaseTable {
	return &leaseTable{m: make(map[string]*heldLease), gone: make(map[string]goneLease)}
}

// add records a lease granted to this process. A lease the table held for
// the same task before is gone (the store granted a new one): it is marked
// lost and its handler, if running, is cancelled.
func (lt *leaseTable) add(taskID, leaseID string, expires time.Time) {
	lt.addLease(taskID, &heldLease{leaseID: leaseID, expires: expires})
}

// addTask records the lease of a task leased to this process, with the
// attempt it was granted for (see cancelledAttempt).
func (lt *leaseTable) addTask(t *store.Task) {
	lt.addLease(t.ID, &heldLease{leaseID: t.LeaseID, expires: t.LeaseExpiresAt, attempt: t.Attempt, started: t.StartedAt})
}

func (lt *leaseTable) addLease(taskID string, h *heldLease) {
	leaseID := h.leaseID
	lt.mu.Lock()
	if g, ok := lt.gone[taskID]; ok && g.matches(h) {
		// Cancelled before it got here: it never starts.
		delete(lt.gone, taskID)
		h.lost = true
	}
	old := lt.m[taskID]
	lt.m[taskID] = h
	var cancel context.CancelCauseFunc
	if old != nil && old.leaseID != leaseID {
		old.lost = true
		cancel = old.cancel
	}
	lt.mu.Unlock()
	if cancel != nil {
		cancel(ErrLeaseLost)
	}
}

// extended records a successful extension.
func (lt *leaseTable) extended(h *heldLease, until time.Time) {
	lt.mu.Lock()
	h.expires = until
	lt.mu.Unlock()
}

// start attaches a running handler's cancel function to its lease. It
// reports false when leaseID is not the task's current lease or was lost
// while the task waited to start.
func (lt *leaseTable) start(taskID, leaseID string, cancel context.CancelCauseFunc) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	h := lt.m[taskID]
	if h == nil || h.leaseID != leaseID || h.lost {
		return false
	}
	h.cancel = cancel
	return true
}

// startInTime is start for a lease that must also be more than margin
// from its last known expiry at now: one closer (its fetch answered late,
// or it waited to start while heartbeats failed) is not started but marked
// lost, as the watchdog would mark it on its next pass, and expiring
// reports so. A handler started on it would run with its context live
// until that pass, past the expiry on a loaded machine. A lease the
// watchdog marked while it waited is reported expiring too.
func (lt *leaseTable) startInTime(taskID, leaseID string, cancel context.CancelCauseFunc, now time.Time, margin time.Duration) (started, expiring bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	h := lt.m[taskID]
	if h == nil || h.leaseID != leaseID {
		return false, false
	}
	if h.lost {
		// One the watchdog stopped while it waited (a prefetched task)
		// is given back like one found about to expire here.
		return false, h.expired
	}
	if !h.expires.IsZero() && now.After(h.expires.Add(-margin)) {
		h.lost, h.expired = true, true
		return false, true
	}
	h.cancel = cancel
	return true, false
}

// holds reports whether h is still the lease held for taskID.
func (lt *leaseTable) holds(taskID string, h *heldLease) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.m[taskID] == h
}

// markLost records that a lease is gone and cancels its handler if running.
func (lt *leaseTable) markLost(h *heldLease) {
	lt.mu.Lock()
	h.lost, h.expired = true, false // gone for sure: nothing to give back
	cancel := h.cancel
	lt.mu.Unlock()
	if cancel != nil {
		cancel(ErrLeaseLost)
	}
}

// isFinishing reports whether h's attempt has ended (finish).
func (lt *leaseTable) isFinishing(h *heldLease) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return h.finishing
}

// leaseOf returns the lease id held for taskID ("" if none).
func (lt *leaseTable) leaseOf(taskID string) string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if h := lt.m[taskID]; h != nil {
		return h.leaseID
	}
	return ""
}

// cancelled records that taskID was cancelled while leaseID was held: if
// this process holds that lease, the lease is lost and its handler (if
// started) is cancelled with ErrTaskCancelled. It reports whether the
// lease was held here. A lease not (yet) here is remembered: a fetch or an
// insert that leased it may still be on its way to the table (addLease).
func (lt *leaseTable) cancelled(taskID, leaseID string) bool {
	lt.mu.Lock()
	h := lt.m[taskID]
	if h == nil || h.leaseID != leaseID {
		lt.remember(taskID, goneLease{leaseID: leaseID})
		lt.mu.Unlock()
		return false
	}
	lt.stopCancelled(h)
	return true
}

// stopCancelled marks h lost and cancels its handler with ErrTaskCancelled
// even when h was lost already: whoever marked it may not have cancelled
// the handler yet, and a canceller must find the handler told when it
// returns (cancelling twice is harmless). lt.mu is held; it is released.
func (lt *leaseTable) stopCancelled(h *heldLease) {
	h.lost = true
	cancel := h.cancel
	lt.mu.Unlock()
	if cancel != nil {
		cancel(ErrTaskCancelled)
	}
}

// remember records a cancelled lease or attempt not held here, and forgets
// those recorded more than goneTTL ago. lt.mu is held.
func (lt *leaseTable) remember(taskID string, g goneLease) {
	now := time.Now()
	lt.forgetGone(now)
	g.at = now
	lt.gone[taskID] = g
}

// forgetGone forgets the cancellations recorded more than goneTTL ago, at
// most once a second. Both remember and the watchdog's passes (expire)
// call it, so that a burst of them goes even when none follows. lt.mu is
// held.
func (lt *leaseTable) forgetGone(now time.Time) {
	if now.Sub(lt.lastPurge) <= time.Second {
		return
	}
	for id, old := range lt.gone {
		if now.Sub(old.at) > goneTTL {
			delete(lt.gone, id)
		}
	}
	lt.lastPurge = now
}

// matches reports whether h is the cancelled lease or attempt g names.
func (g goneLease) matches(h *heldLease) bool {
	if g.leaseID != "" {
		return g.leaseID == h.leaseID
	}
	return h.attempt > 0 && g.attempt == h.attempt && g.started == h.started.UnixMicro()
}

// cancelledAttempt records that taskID was cancelled while its attempt
// number attempt, started at started, was the last one: if this process
// holds the lease of that attempt, the lease is lost and its handler (if
// started) is cancelled with ErrTaskCancelled. A canceller learns the
// attempt from the cancelled task, so this finds the lease even when it
// was granted after the canceller looked (leaseOf) and before the
// cancellation committed, and even when it comes into the table after
// this call (a fetch's tasks are added once it committed). A lease granted
// after the cancellation, once the task was retried, is of another attempt
// (numbered from 1 again, started later) and is left alone. It reports
// whether such a lease was held here.
func (lt *leaseTable) cancelledAttempt(taskID string, attempt int, started time.Time) bool {
	if attempt <= 0 || started.IsZero() {
		return false
	}
	lt.mu.Lock()
	h := lt.m[taskID]
	g := goneLease{attempt: attempt, started: started.UnixMicro()}
	if h == nil || !g.matches(h) {
		lt.remember(taskID, g)
		lt.mu.Unlock()
		return false
	}
	lt.stopCancelled(h)
	return true
}

// finish records that the attempt under leaseID has ended and its outcome
// is being recorded: the lease stays in the table, extended by the
// heartbeats like a running one, until remove drops it once the outcome
// has committed (or failed to). It reports false, like remove, when
// leaseID is not taskID's current lease: that copy is stale, and what it
// did must not be recorded. It reports false too when the attempt was
// finished already: its lease is being given back (a handler that ignored
// its cancellation at shutdown), and whatever the handler returns now is
// dropped.
func (lt *leaseTable) finish(taskID, leaseID string) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	h := lt.m[taskID]
	if h == nil || h.leaseID != leaseID || h.finishing {
		return false
	}
	h.finishing = true
	h.cancel = nil
	return true
}

// remove drops the entry of taskID if leaseID is its current lease, and
// reports whether it was. A false answer means the copy under leaseID is
// stale: the task was leased again (or released) since, so whatever that
// copy did must not be recorded.
func (lt *leaseTable) remove(taskID, leaseID string) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if h := lt.m[taskID]; h != nil && h.leaseID == leaseID {
		delete(lt.m, taskID)
		return true
	}
	return false
}

// expire is the local lease watchdog: every lease whose last known expiry
// (as granted or last successfully extended) is less than margin after now
// is marked lost and its handler cancelled, whether or not a heartbeat could
// reach the store. It returns the ids of the tasks it stopped and the
// earliest instant a lease still held is to be stopped at (its expiry less
// margin; zero when none). It forgets old cancellations too (forgetGone).
func (lt *leaseTable) expire(now time.Time, margin time.Duration) (stopped []string, next time.Time) {
	var cancels []context.CancelCauseFunc
	lt.mu.Lock()
	lt.forgetGone(time.Now()) // as remember: gone's times are the system clock's
	for id, h := range lt.m {
		if h.lost || h.expires.IsZero() || h.finishing {
			// A finishing lease has no handler to stop: if it did run
			// out, the store refuses its outcome.
			continue
		}
		stopAt := h.expires.Add(-margin)
		if now.After(stopAt) {
			h.lost, h.expired = true, true
			stopped = append(stopped, id)
			if h.cancel != nil {
				cancels = append(cancels, h.cancel)
			}
			continue
		}
		if next.IsZero() || stopAt.Before(next) {
			next = stopAt
		}
	}
	lt.mu.Unlock()
	for _, c := range cancels {
		c(ErrLeaseExpired)
	}
	return stopped, next
}

// snapshot returns the leases held, for a heartbeat: running, waiting to
// start, and finishing (their outcome not yet committed).
func (lt *leaseTable) snapshot() ([]store.LeaseRef, []*heldLease) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	refs := make([]store.LeaseRef, 0, len(lt.m))
	held := make([]*heldLease, 0, len(lt.m))
	for id, h := range lt.m {
		refs = append(refs, store.LeaseRef{TaskID: id, LeaseID: h.leaseID})
		held = append(held, h)
	}
	return refs, held
}

// heartbeatLoop extends every in-process lease each third of the lease
// duration. A lease found lost cancels its handler's context. Each call is
// bounded by the heartbeat interval, so a store that hangs (a pool wait, a
// row lock, a silently dropped connection) delays the next heartbeat by at
// most that much; leaseWatchdog stops the handlers whose leases run out
// meanwhile. A call that fails (the database is briefly away) is tried
// again after a tenth of the interval rather than a whole interval later:
// the leases it carried keep their last expiry, and two failures in a row
// at the interval's pace would let them run out although the database may
// be back long before.
func (e *Engine) heartbeatLoop(ctx context.Context) {
	interval := e.cfg.LeaseDuration / 3
	retry := max(interval/10, time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	next := time.Now().Add(interval)
	fails := 0 // passes failed in a row
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		// While the store stays away, one failure in ten is logged (about
		// one per interval).
		if e.heartbeat(ctx, interval, fails%10 == 0) {
			fails = 0
			// On the interval's pace from the last pass's start, so that
			// slow calls do not push each heartbeat later.
			next = next.Add(interval)
			if next.Before(start) {
				next = start.Add(interval)
			}
		} else {
			fails++
			next = time.Now().Add(retry)
		}
		timer.Reset(max(time.Until(next), 0))
	}
}

// heartbeat extends every in-process lease once, in batches of 1,000, each
// call bounded by timeout. It reports false when a call failed (its leases
// keep their last expiry), and logs the failure if logFailure is set.
func (e *Engine) heartbeat(ctx context.Context, timeout time.Duration, logFailure bool) (ok bool) {
	refs, held := e.leases.snapshot()
	if len(refs) == 0 {
		return true
	}
	if !e.clockReady() {
		// The clock stepped and is being measured again: an expiry
		// written now could be far off on the database's timeline. The
		// leases keep their last expiry until the retry.
		return false
	}
	ok = true
	for start := 0; start < len(refs) && ctx.Err() == nil; start += 1000 {
		end := min(start+1000, len(refs))
		// Each call on its own time: behind slow earlier calls, a time
		// read once for the pass would extend this call's leases by what
		// is left of a lease counted from the pass's start, and have the
		// store judge their expiry by a time already past.
		now := e.now()
		for i := start; i < end; i++ {
			refs[i].ExpiresAt = now.Add(e.cfg.LeaseDuration)
		}
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		errs, err := e.st.ExtendLeases(callCtx, store.ExtendParams{Leases: refs[start:end], Now: now})
		cancel()
		if err != nil {
			// The database is away or slow: these leases keep their last
			// expiry, and the watchdog stops their handlers a margin
			// before it (another worker may be given the tasks then).
			if ctx.Err() == nil && logFailure {
				e.log.Warn("heartbeat failed", "leases", end-start, "err", err)
			}
			ok = false
			continue
		}
		for i, err := range errs {
			if err == nil {
				e.leases.extended(held[start+i], refs[start+i].ExpiresAt)
			}
			if err != nil && e.leases.holds(refs[start+i].TaskID, held[start+i]) {
				// Still held here, yet gone in the store: reaped,
				// cancelled or expired. (A lease whose task finished
				// since the snapshot is simply no longer held; one whose
				// outcome is committing may have lost it to that very
				// commit, and has no handler left to cancel.)
				if !e.leases.isFinishing(held[start+i]) {
					e.log.Warn("lease lost; cancelling handler", "task_id", refs[start+i].TaskID, "err", err)
				}
				e.leases.markLost(held[start+i])
			}
		}
	}
	return ok
}

// leaseWatchdog stops, independently of the heartbeat calls, the handlers
// whose lease expiry (as granted or last successfully extended) is less
// than watchdogMargin away: from the expiry on the reaper may give their
// tasks to another worker, and they must have stopped by then. It checks
// every third of the lease duration, and at the earliest such instant when
// that comes sooner.
func (e *Engine) leaseWatchdog(ctx context.Context) {
	interval := e.cfg.LeaseDuration / 3
	margin := watchdogMargin(e.cfg.LeaseDuration)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := e.now()
		stopped, next := e.leases.expire(now, margin)
		for _, id := range stopped {
			e.log.Warn("lease about to expire without a heartbeat; cancelling handler", "task_id", id, "margin", margin)
		}
		wait := interval
		if !next.IsZero() {
			// Just past the instant: a lease is stopped once now is after it.
			wait = min(wait, next.Sub(now)+time.Millisecond)
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// watchdogMargin is how long before a lease's known expiry the watchdog
// stops its handler: a tenth of the lease (3 s of the default 30 s). It
// covers the watchdog's timer firing late on a loaded machine, the
// handler's return and the give-back of its lease, and the uncertainty of
// the clock offset between nodes, so that the handler has stopped before
// another node's reaper, on time, may hand the task to another worker. A
// heartbeat that succeeds keeps a lease at least a third of it ahead.
func watchdogMargin(lease time.Duration) time.Duration { return lease / 10 }
