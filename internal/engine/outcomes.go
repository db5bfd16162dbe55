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
	for backoff, tries := 50*time.Millisecond, 0; err != nil && errors.Is(err, store.ErrUnavailable) && tries < 8 && ctx.Err() == nil; tries++ {
		e.log.Warn("record outcomes: database unavailable; retrying", "outcomes", len(outs), "backoff", backoff, "err", err)
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
		now = e.now()
		errs, err = e.st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now})
	}
	if err != nil {
		return nil, nil, err
	}
	e.ctr.outcomeCommits.Add(1)
	e.ctr.outcomes.Add(int64(len(outs)))
	ready := false
	var earliest time.Time
	for i := range outs {
		if i < len(errs) && errs[i] != nil {
			e.ctr.leaseLost.Add(1)
			continue
		}
		o := &outs[i]
		switch o.State {
		case store.StateSucceeded:
			e.ctr.succeeded.Add(1)
		case store.StateDead:
			e.ctr.dead.Add(1)
		}
		if o.State == store.StateRetryWaiting {
			e.ctr.retried.Add(1)
		}
		switch o.State {
		case store.StatePending:
			ready = true
		case store.StateRetryWaiting:
			if !o.RunAt.After(now) {
				ready = true
			} else if earliest.IsZero() || o.RunAt.Before(earliest) {
				earliest = o.RunAt
			}
		}
	}
	if ready {
		e.wake.broadcast()
	}
	if !earliest.IsZero() {
		e.sched.poke(earliest)
	}
	return nil, errs, nil
}

// logOutcome writes the structured log line of a state change.
func (e *Engine) logOutcome(t *store.Task, o *store.Outcome, err error) {
	// Check the level first: building the attributes allocates, and a
	// successful attempt, logged at info, is the hot path.
	level := outcomeLevel(o, err)
	if !e.log.Enabled(context.Background(), level) {
		return
	}
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			e.log.Warn("outcome refused: lease lost", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "outcome", o.State)
		} else {
			e.log.Error("record outcome failed", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "err", err)
		}
		return
	}
	switch o.State {
	case store.StateSucceeded:
		e.log.Info("task succeeded", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt)
	case store.StateRetryWaiting:
		e.log.Warn("task will retry", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt,
			"error_code", o.Error.Code, "error_class", o.Error.Class, "error", o.Error.Message,
			"delay_seconds", o.LastDelay.Seconds())
	case store.StateDead:
		e.log.Error("task dead", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt,
			"reason", o.DeadReason, "error_code", o.Error.Code, "error_class", o.Error.Class, "error", o.Error.Message)
	case store.StatePending:
		e.log.Info("task released", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt)
	}
}

// outcomeLevel is the level logOutcome logs an outcome (or the error
// recording it) at.
func outcomeLevel(o *store.Outcome, err error) slog.Level {
	switch {
	case err != nil && errors.Is(err, store.ErrLeaseLost):
		return slog.LevelWarn
	case err != nil:
		return slog.LevelError
	case o.State == store.StateRetryWaiting:
		return slog.LevelWarn
	case o.State == store.StateDead:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// record submits an outcome and waits until it is committed.
func (e *Engine) record(ctx context.Context, t *store.Task, o store.Outcome) error {
	_, err := e.outcomes.do(ctx, o)
	e.logOutcome(t, &o, err)
	return err
}
