package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

const (
	promoteBatch = 1000
	reapBatch    = 500
)

// schedPoke tells the scheduler that something is due at a given time
// (zero: "look again"), without a database read.
type schedPoke struct {
	mu       sync.Mutex
	earliest time.Time
	recheck  bool
	ch       chan struct{}
}

func newSchedPoke() *schedPoke { return &schedPoke{ch: make(chan struct{}, 1)} }

func (s *schedPoke) poke(at time.Time) {
	s.mu.Lock()
	if at.IsZero() {
		s.recheck = true
	} else if s.earliest.IsZero() || at.Before(s.earliest) {
		s.earliest = at
	}
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *schedPoke) take() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, re := s.earliest, s.recheck
	s.earliest, s.recheck = time.Time{}, false
	return at, re
}

// schedOutages logs the failures of the scheduler loops' store calls
// once per outage each (outageLog): while the database is away, every pass
// (once per PollInterval) fails alike.
type schedOutages struct {
	promote, reap, wakeup, retention, prune outageLog
	// postponed logs the types whose expired leases the reaper leaves.
	postponed postponedLog
}

// newSchedOutages returns the outage logs of one term of the scheduler
// loops. They remind of a lasting outage as often as the leader lease's
// (leaderState.remindEvery).
func (e *Engine) newSchedOutages() *schedOutages {
	o := &schedOutages{}
	for _, l := range []*outageLog{&o.promote, &o.reap, &o.wakeup, &o.retention, &o.prune} {
		l.log, l.every = e.log, e.leading.remindEvery
	}
	o.postponed.log = e.log
	return o
}

// stopped logs, as the loops stop (the leadership is lost or the node
// stops), each outage still open, so that it does not end on its warning.
func (o *schedOutages) stopped() {
	o.promote.stopped("scheduler: promotion stopped while still failing")
	o.reap.stopped("scheduler: reaping stopped while still failing")
	o.wakeup.stopped("scheduler: next wake-up lookups stopped while still failing")
	o.retention.stopped("scheduler: retention stopped while still failing")
	o.prune.stopped("node registry: pruning stopped while still failing")
}

// runScheduler runs the central scheduler loops while ctx (the leadership
// context) lives: retry/scheduled promotion and lease reaping, woken exactly
// at the next due time, and retention every RetentionInterval. Failed calls
// are logged once per outage (schedOutages).
func (e *Engine) runScheduler(ctx context.Context) {
	ctx = context.WithValue(ctx, schedLoopKey{}, ctx)
	out := e.newSchedOutages()
	e.log.Info("scheduler loops started", "node", e.cfg.NodeID, "retention", e.Retention())
	defer e.log.Info("scheduler loops stopped", "node", e.cfg.NodeID)
	defer out.stopped()
	// The first pass runs at once; next records that the timer is armed
	// for now, so that a wake-up already waiting (say for a task delayed
	// by an hour) cannot push the first pass back to its own time.
	timer := time.NewTimer(0)
	defer timer.Stop()
	nextRetention := time.Now()
	next := time.Now() // wall-clock time the timer is set for
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.sched.ch:
			at, recheck := e.sched.take()
			if recheck {
				at = time.Now()
			} else if !at.IsZero() {
				at = e.localTime(at) // a due time of the engine's clock
			}
			if at.IsZero() || !at.Before(next) {
				continue
			}
			next = at
			resetTimer(timer, time.Until(at))
			continue
		case <-timer.C:
		}
		if ctx.Err() != nil {
			return
		}
		promoted, cut := e.promote(ctx, &out.promote)
		reaped, passed := e.reap(ctx, &out.reap, &out.postponed)
		if len(passed) > store.MaxExcludeTypes {
			passed, reaped = nil, false // too many to leave out: their expiries count
		}
		if !time.Now().Before(nextRetention) {
			// One batch per pass, so that a backlog of finished tasks does
			// not hold up promotion and reaping: while batches come back
			// full, the next pass follows at once.
			if e.retention(ctx, &out.retention) {
				nextRetention = time.Now()
			} else {
				e.pruneNodes(ctx, &out.prune)
				nextRetention = time.Now().Add(e.cfg.RetentionInterval)
			}
		}
		// Sleep until the earliest of: the next due task, the next lease
		// expiry, the next retention run, and the poll interval (the
		// fallback for work made due by other nodes). A due time already
		// past that this pass could not deal with (promotion failed, or a
		// lease it could not reap) is no reason to run again at once: the
		// next pass would fail the same way, and the loop would spin on the
		// database (and the log) for as long as the cause lasts. It is
		// tried again after the poll interval, or at the next poke. So is a
		// due time at or before the promotion's cut-off: the promotion
		// moved every task due then that it could, and left that one
		// (PostgreSQL skips the rows another transaction holds locked).
		next = time.Now().Add(e.cfg.PollInterval)
		now := e.now()
		cctx, cancel := e.schedCallCtx(ctx)
		// The leases of the types the reaper passed over stay expired; left
		// out, they do not hide the next expiry it can reap.
		wk, err := e.st.NextWakeup(cctx, store.WakeupParams{ExcludeTypes: passed})
		cancel()
		if err == nil {
			out.wakeup.recovered("scheduler: next wake-up lookup works again")
			for _, w := range []struct {
				at, cut time.Time
				done    bool
			}{{wk.NextRunAt, cut, promoted}, {wk.NextLeaseExpiry, time.Time{}, reaped}} {
				if w.at.IsZero() || (!w.done && !w.at.After(now)) || (!w.cut.IsZero() && !w.at.After(w.cut)) {
					continue
				}
				if at := e.localTime(w.at); at.Before(next) {
					next = at
				}
			}
		} else if ctx.Err() == nil {
			out.wakeup.failed("scheduler: next wake-up lookup", err)
		}
		if nextRetention.Before(next) {
			next = nextRetention
		}
		resetTimer(timer, time.Until(next))
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if d < 0 {
		d = 0
	}
	t.Reset(d)
}

// promote moves due scheduled and retry_waiting tasks to pending. It
// reports false when a promotion failed. When its last batch was not full,
// cut is that batch's time: every task due then that the store could move
// was moved, and one still due then was left on purpose (a row locked
// elsewhere), no reason for another pass at once. cut is zero when the
// batches were bounded with more perhaps left, or when it failed. A
// failure is logged on o.
func (e *Engine) promote(ctx context.Context, o *outageLog) (ok bool, cut time.Time) {
	total := 0
	ok = true
	for i := 0; i < 100 && ctx.Err() == nil; i++ { // bounded: at most 100 batches per wake-up
		now := e.now()
		cctx, cancel := e.schedCallCtx(ctx)
		n, err := e.st.PromoteDue(cctx, store.PromoteParams{Limit: promoteBatch, Now: now})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				o.failed("scheduler: promote due tasks", err)
			}
			ok = false
			break
		}
		o.recovered("scheduler: promoting due tasks works again")
		total += n
		e.ctr.promoted.Add(int64(n))
		if n > 0 {
			e.wake.broadcast()
		}
		if n < promoteBatch {
			cut = now
			break
		}
	}
	if total > 0 {
		e.log.Debug("promoted due tasks", "count", total)
	}
	return ok, cut
}

// reap applies the retry decision to tasks whose lease expired. It reports
// false when it left expired leases it could not reap for another reason
// than passed: the types whose configuration could not be read, whose
// leases it leaves expired (at most store.MaxExcludeTypes; more make it
// report false). A failed listing or recording is logged on o; a pass
// that lists and records without one ends the outage. The types postponed,
// and those whose configuration reads again, are logged on pl.
func (e *Engine) reap(ctx context.Context, o *outageLog, pl *postponedLog) (ok bool, passed []string) {
	ok = true
	failed := false
	defer func() {
		if !failed && ctx.Err() == nil {
			o.recovered("scheduler: reaping expired leases works again")
		}
	}()
	// Types whose configuration could not be read in this pass: their
	// tasks are left expired, and the later listings of the pass leave
	// them out, so that a full batch of them at the head of the list (a
	// configuration this binary cannot decode, written by a newer version)
	// does not come back on every listing and hide the tasks behind it.
	var postponed map[string]bool
	var exclude []string
	pl.beginPass()
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		if len(exclude) > store.MaxExcludeTypes {
			return false, nil // bounded: the rest waits for the next pass
		}
		now := e.now()
		cctx, cancel := e.schedCallCtx(ctx)
		tasks, err := e.st.ExpiredLeases(cctx, store.ExpiredParams{Limit: reapBatch, Now: now, ExcludeTypes: exclude})
		cancel()
		if err != nil {
			if failed = ctx.Err() == nil; failed {
				o.failed("scheduler: list expired leases", err)
			}
			return false, exclude
		}
		if len(tasks) == 0 {
			pl.passComplete()
			return ok, exclude
		}
		full := len(tasks) == reapBatch
		// Decide under each type's own configuration. A type whose
		// configuration cannot be read now (the database is briefly away,
		// or it does not decode) is left for the next pass rather than
		// decided under the engine's defaults, which could dead-letter its
		// tasks under the wrong max attempts or error lists; its leases
		// stay expired until then.
		outs := make([]store.Outcome, 0, len(tasks))
		kept := tasks[:0]
		for j := range tasks {
			typ := tasks[j].Type
			if postponed[typ] {
				continue
			}
			spec, err := e.decidingSpec(ctx, typ)
			if err != nil {
				if postponed == nil {
					postponed = make(map[string]bool)
				}
				postponed[typ] = true
				exclude = append(exclude, typ)
				pl.postponed(typ, err)
				continue
			}
			pl.readable(typ)
			kept = append(kept, tasks[j])
			outs = append(outs, e.Decide(&kept[len(kept)-1], &spec, Failure{LeaseExpired: true}, now))
		}
		if tasks = kept; len(tasks) == 0 {
			if !full {
				pl.passComplete()
				return ok, exclude
			}
			continue // list past the postponed types
		}
		cctx, cancel = e.schedCallCtx(ctx)
		errs, err := e.st.RecordOutcomes(cctx, store.OutcomeParams{Outcomes: outs, Now: now})
		cancel()
		if err != nil {
			if failed = ctx.Err() == nil; failed {
				o.failed("scheduler: record reaped outcomes", err)
			}
			return false, exclude
		}
		woke := false
		for j := range tasks {
			var oerr error
			if j < len(errs) {
				oerr = errs[j]
			}
			if oerr == nil {
				// A refused reap (the worker's heartbeat extended the lease
				// after the listing) is not counted.
				e.ctr.reaped.Add(1)
				e.ctr.countRecorded(&outs[j])
				woke = woke || outs[j].State == store.StateRetryWaiting
			}
			e.logOutcome(&tasks[j], &outs[j], oerr)
		}
		if woke {
			e.sched.poke(time.Time{})
		}
		if !full {
			pl.passComplete()
			return ok, exclude
		}
	}
	return ok, exclude // bounded: more expired leases may be left for the next pass, at once
}

// retention deletes one batch of finished tasks past their age and logs
// the counts. It reports whether a class filled its batch, so that more
// may be left. A failure is logged on o.
func (e *Engine) retention(ctx context.Context, o *outageLog) (more bool) {
	now := e.now()
	p := store.RetentionParams{Limit: retentionBatch}
	if e.cfg.SucceededRetention > 0 {
		p.SucceededBefore = now.Add(-e.cfg.SucceededRetention)
	}
	if e.cfg.CancelledRetention > 0 {
		p.CancelledBefore = now.Add(-e.cfg.CancelledRetention)
	}
	if e.cfg.DeadRetention > 0 {
		p.DeadBefore = now.Add(-e.cfg.DeadRetention)
	}
	if p.SucceededBefore.IsZero() && p.CancelledBefore.IsZero() && p.DeadBefore.IsZero() {
		return false
	}
	cctx, cancel := e.schedCallCtx(ctx)
	res, err := e.st.DeleteFinished(cctx, p)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			o.failed("scheduler: retention", err)
		}
		return false
	}
	o.recovered("scheduler: retention works again")
	e.retained.add(res)
	if res.Succeeded+res.Cancelled+res.Dead > 0 {
		e.log.Info("retention deleted finished tasks", "succeeded", res.Succeeded, "cancelled", res.Cancelled, "dead", res.Dead)
	}
	return res.Succeeded == p.Limit || res.Cancelled == p.Limit || res.Dead == p.Limit
}

// pruneNodes deletes the registry rows of nodes not seen for
// NodeRetention, judged on the registry's clock (RegistryNow), and logs
// how many went. A failure is logged on o.
func (e *Engine) pruneNodes(ctx context.Context, o *outageLog) {
	if e.cfg.NodeRetention < 0 {
		return
	}
	cctx, cancel := e.schedCallCtx(ctx)
	defer cancel()
	n, err := e.st.PruneNodes(cctx, store.PruneNodesParams{SeenBefore: e.RegistryNow(cctx).Add(-e.cfg.NodeRetention)})
	switch {
	case err != nil:
		if ctx.Err() == nil {
			o.failed("node registry: pruning", err)
		}
		return
	case n > 0:
		e.log.Info("node registry: deleted the rows of nodes not seen for a while", "nodes", n, "not_seen_for", RetentionText(e.cfg.NodeRetention))
	}
	o.recovered("node registry: pruning works again")
}

// Retention is how long the engine keeps finished tasks when it leads,
// defaults applied. A negative duration keeps the class forever.
type Retention struct {
	Succeeded, Cancelled, Dead time.Duration
}

// LogValue implements slog.LogValuer: each class as "30d", "12h0m0s" or
// "forever".
func (r Retention) LogValue() slog.Value {
	return slog.GroupValue(slog.String("succeeded", RetentionText(r.Succeeded)),
		slog.String("cancelled", RetentionText(r.Cancelled)), slog.String("dead", RetentionText(r.Dead)))
}

// RetentionText prints a retention as an operator writes it: "forever"
// when negative, whole days as "30d", else Go's duration text.
func RetentionText(d time.Duration) string {
	switch {
	case d < 0:
		return "forever"
	case d > 0 && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// Retention returns the retention this engine enforces when it leads.
// Several nodes may be configured differently: the leader's applies.
func (e *Engine) Retention() Retention {
	return Retention{Succeeded: e.cfg.SucceededRetention, Cancelled: e.cfg.CancelledRetention, Dead: e.cfg.DeadRetention}
}

// retentionBatch bounds the tasks of each class one retention pass deletes.
// A pass is one transaction, which on SQLite holds the single writer (every
// enqueue, fetch, heartbeat and outcome waits for it) and on PostgreSQL
// must end within the scheduler's call bound: 10,000 a class held SQLite's
// writer for seconds. While batches come back full the passes follow one
// another at once, with other writes in between.
const retentionBatch = 1000

// schedCallCtx bounds one store call of the scheduler loops by the leader
// lease's TTL: a call stuck on a dead connection must not keep the loops
// (and so the lease, which other connections keep renewing) from doing
// anything, as a leader that promotes and reaps nothing would. It also
// ends the call at the safe end of the last renewal, on this process's
// monotonic clock: a call made after it gets a context already done, so
// nothing reaches the store even if the watchdog that cancels the loops
// has not run yet (a process stopped past the safe end runs its overdue
// timers and its goroutines in no set order when it resumes).
func (e *Engine) schedCallCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(max(e.cfg.LeaderTTL, time.Second))
	if safe := e.leaseSafeEnd(); !safe.IsZero() && safe.Before(end) {
		end = safe
	}
	return context.WithDeadline(ctx, end)
}

// schedLoopKey is the context key under which runScheduler stores its own
// context (the loops' term), so that a call's context can be traced back to
// the loops that made it.
type schedLoopKey struct{}

// retentionCounts accumulates what retention deleted since start.
type retentionCounts struct {
	mu  sync.Mutex
	sum store.RetentionResult
}

func (r *retentionCounts) add(x store.RetentionResult) {
	r.mu.Lock()
	r.sum.Succeeded += x.Succeeded
	r.sum.Cancelled += x.Cancelled
	r.sum.Dead += x.Dead
	r.mu.Unlock()
}

// Retained returns how many finished tasks retention deleted on this node.
func (e *Engine) Retained() store.RetentionResult {
	e.retained.mu.Lock()
	defer e.retained.mu.Unlock()
	return e.retained.sum
}
