package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/retryq/retryq/store"
)

// commitOutcomes records a batch of outcomes in one transaction and wakes
// whoever the new states concern.
func (e *Engine) commitOutcomes(ctx context.Context, outs []store.Outcome) ([]struct{}, []error, error) {
	// Bound the commit, retries included, by the lease duration: a database
	// that hangs (a silently dropped connection, a row lock) must not hang
	// the worker's shutdown or the engine's Close, and once the leases of
	// the batch have run out the store would refuse its outcomes anyway;
	// the reaper's retry decision then applies, as after a crash.
	ctx, cancel := context.WithTimeout(ctx, e.cfg.LeaseDuration)
	defer cancel()
	now := e.now()
	errs, err := e.st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now})
	// A database that is briefly away (restart, failover, network blip)
	// should not cost finished work: retry the whole batch for a while. The
	// leases stay valid meanwhile unless the outage outlasts them, in which
	// case the conditional updates refuse the outcomes and the reaper's
	// retry decision applies instead.
	//
	// Such a failure may also come after the commit (a connection lost
	// before the answer): the try that follows is then refused by the lease
	// check, as it must be, and unsure keeps the Now of each failed try to
	// tell those refusals from lost leases (settleUnsure).
	var unsure []time.Time
	for backoff, tries := 50*time.Millisecond, 0; err != nil && errors.Is(err, store.ErrUnavailable) && tries < 8 && ctx.Err() == nil; tries++ {
		e.log.Warn("record outcomes: database unavailable; retrying", "outcomes", len(outs), "backoff", backoff, "err", err)
		unsure = append(unsure, now)
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
		now = e.now()
		errs, err = e.st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now})
	}
	if err != nil {
		return nil, nil, err
	}
	if len(unsure) > 0 {
		e.settleUnsure(ctx, outs, errs, unsure)
	}
	e.ctr.outcomeCommits.Add(1)
	ready := false
	var earliest time.Time
	recorded := 0
	for i := range outs {
		if i < len(errs) && errs[i] != nil {
			e.ctr.leaseLost.Add(1) // refused: counted here, not as recorded
			continue
		}
		o := &outs[i]
		recorded++
		e.ctr.countRecorded(o)
		switch o.State {
		case store.StatePending:
			if !o.RunAt.After(now) {
				ready = true
			} else if earliest.IsZero() || o.RunAt.Before(earliest) {
				earliest = o.RunAt // a delayed release (holdBack)
			}
		case store.StateRetryWaiting:
			if !o.RunAt.After(now) {
				ready = true
			} else if earliest.IsZero() || o.RunAt.Before(earliest) {
				earliest = o.RunAt
			}
		}
	}
	e.ctr.outcomes.Add(int64(recorded))
	if ready {
		e.wake.broadcast()
	}
	if !earliest.IsZero() {
		e.sched.poke(earliest)
	}
	return nil, errs, nil
}

// settleUnsure clears the refusals of the outcomes that an earlier try of
// their batch applied, a try that failed with the commit possibly made (at
// the times tries): the task is in the state the outcome gives and was
// last written at that try's Now, which no other write of the task takes
// (each takes its own). Each task is settled once: a batch naming a lease
// twice applied it once. A refusal that cannot be checked (the task cannot
// be read) stays a refusal.
func (e *Engine) settleUnsure(ctx context.Context, outs []store.Outcome, errs []error, tries []time.Time) {
	var settled map[string]bool
	for i := range outs {
		o := &outs[i]
		if i >= len(errs) || !errors.Is(errs[i], store.ErrLeaseLost) || settled[o.TaskID] {
			continue
		}
		t, err := e.st.GetTask(ctx, o.TaskID)
		if err != nil || !outcomeLeft(o, t.State) {
			continue
		}
		for _, at := range tries {
			if t.UpdatedAt.Equal(storedTime(at)) {
				e.log.Info("outcome recorded by a try whose answer was lost", "task_id", o.TaskID, "outcome", o.State)
				errs[i] = nil
				if settled == nil {
					settled = make(map[string]bool)
				}
				settled[o.TaskID] = true
				break
			}
		}
	}
}

// outcomeLeft reports whether o, applied, leaves its task in state s (a
// retry or a release is stored pending or retry_waiting, by its run time).
func outcomeLeft(o *store.Outcome, s store.State) bool {
	switch o.State {
	case store.StateRetryWaiting, store.StatePending:
		return s == store.StateRetryWaiting || s == store.StatePending
	default:
		return s == o.State
	}
}

// logOutcome writes the structured log line of a state change.
func (e *Engine) logOutcome(t *store.Task, o *store.Outcome, err error) {
	var (
		level slog.Level
		msg   string
		extra []any
	)
	switch {
	case err != nil && errors.Is(err, store.ErrLeaseLost):
		level, msg, extra = slog.LevelWarn, "outcome refused: lease lost", []any{"outcome", o.State}
	case err != nil:
		level, msg, extra = slog.LevelError, "record outcome failed", []any{"err", err}
	case o.State == store.StateSucceeded:
		level, msg = slog.LevelInfo, "task succeeded"
	case o.State == store.StatePending:
		level, msg = slog.LevelInfo, "task released"
	case o.State == store.StateRetryWaiting:
		level, msg = slog.LevelWarn, "task will retry"
	case o.State == store.StateDead:
		level, msg = slog.LevelError, "task dead"
	default:
		return
	}
	// Check the level before building the record: that allocates, and a
	// successful attempt, logged at info, is the hot path.
	ctx := context.Background()
	if !e.log.Enabled(ctx, level) {
		return
	}
	attrs := append([]any{"task_id", t.ID, "type", t.Type, "attempt", t.Attempt}, extra...)
	switch {
	case err != nil:
	case o.State == store.StateRetryWaiting:
		attrs = append(attrs, "error_code", o.Error.Code, "error_class", o.Error.Class, "error", o.Error.Message,
			"delay_seconds", o.LastDelay.Seconds())
	case o.State == store.StateDead:
		attrs = append(attrs, "reason", o.DeadReason, "error_code", o.Error.Code, "error_class", o.Error.Class, "error", o.Error.Message)
	}
	e.log.Log(ctx, level, msg, attrs...)
}

// record submits an outcome and waits until it is committed.
func (e *Engine) record(ctx context.Context, t *store.Task, o store.Outcome) error {
	_, err := e.outcomes.do(ctx, o)
	e.logOutcome(t, &o, err)
	return err
}

// giveBackExpired releases the lease of an attempt (a handler or a push
// delivery) the lease watchdog stopped (ErrLeaseExpired), in case it is
// current: the watchdog stops it a margin before the expiry, and a
// heartbeat sent before the expiry may commit after the watchdog gave up
// on it. Left alone, the task would sit running under a lease nobody holds
// until the reaper counted the cut attempt as a lease expiry. The store
// refuses the release of a lease that is truly gone (expired, reaped,
// taken): that refusal is not logged, and is counted in LeaseLost as a
// refused outcome is. done runs once the outcome is settled.
func (e *Engine) giveBackExpired(t *store.Task, done func()) {
	out := store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending}
	e.outcomes.submit(out, func(_ struct{}, err error) {
		switch {
		case err == nil:
			e.logOutcome(t, &out, nil)
		case !errors.Is(err, store.ErrLeaseLost):
			e.ctr.leaseLost.Add(1) // the commit failed: counted here, not by commitOutcomes
			e.logOutcome(t, &out, err)
		}
		done()
	})
}
