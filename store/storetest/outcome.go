package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var outcomeTests = []testCase{
	{"Outcome/Succeeded", testOutcomeSucceeded},
	{"Outcome/RetryWaiting", testOutcomeRetryWaiting},
	{"Outcome/RetryDueNowIsPending", testOutcomeRetryDueNow},
	{"Outcome/Dead", testOutcomeDead},
	{"Outcome/Release", testOutcomeRelease},
	{"Outcome/ReleaseKeepsLastError", testReleaseKeepsLastError},
	{"Outcome/DelayedRelease", testOutcomeDelayedRelease},
	{"Outcome/StaleLease", testOutcomeStaleLease},
	{"Outcome/ExpiredLease", testOutcomeExpiredLease},
	{"Outcome/CancelledMeanwhile", testOutcomeCancelled},
	{"Outcome/MixedBatch", testOutcomeMixedBatch},
	{"Outcome/OddText", testOutcomeOddText},
	{"Outcome/RetryZeroRunAtIsNow", testOutcomeRetryZeroRunAt},
	{"Outcome/OddIDsAreLost", testOutcomeOddIDs},
	{"Outcome/PriorityBeyond32Bits", testOutcomePriorityRange},
	{"Outcome/IgnoredRunAtOutOfRange", testOutcomeIgnoredRunAt},
}

// testOutcomeIgnoredRunAt: the RunAt and EffectivePrio of an outcome that
// does not store them (a success, a dead letter, a release due now) are
// ignored, whatever they hold: a time or a priority the database cannot
// store must not fail that outcome, nor the others of its batch, whether
// the batch names each task once or one twice.
func testOutcomeIgnoredRunAt(e *env) {
	now := base.Add(time.Second)
	for _, dup := range []bool{false, true} {
		var outs []store.Outcome
		for i, at := range []time.Time{time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)} {
			name := func(what string) string { return fmt.Sprintf("t_%s%d_%t", what, i, dup) }
			typ := fmt.Sprint("a", i, dup) // the released task of a round is not fetched by the next
			ok := succeed(e.start(base, nt(name("ok"), typ)))
			dead := kill(e.start(base, nt(name("dead"), typ)), "E", store.DeadNonRetryable)
			rel := e.start(base, nt(name("rel"), typ))
			ok.RunAt, dead.RunAt = at, at
			ok.EffectivePrio, dead.EffectivePrio = 1<<40, -1<<40
			outs = append(outs, ok, dead)
			if at.Before(now) { // a release with a RunAt not after Now is due now
				outs = append(outs, store.Outcome{TaskID: rel.ID, LeaseID: rel.LeaseID, State: store.StatePending, RunAt: at, EffectivePrio: 1 << 40})
			} else {
				outs = append(outs, succeed(rel))
			}
		}
		if dup {
			outs = append(outs, outs[0]) // applied after the first: its lease is gone
		}
		errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: now, Outcomes: outs})
		e.noErr("RecordOutcomes", err)
		for i := range 6 {
			e.noErr(fmt.Sprintf("outcome %d (%s of %s)", i, outs[i].State, outs[i].TaskID), errs[i])
		}
		if dup {
			e.isErr("the repeated outcome", errs[6], store.ErrLeaseLost)
		}
		e.get(fmt.Sprintf("t_ok0_%t", dup), store.StateSucceeded)
		e.get(fmt.Sprintf("t_dead1_%t", dup), store.StateDead)
		rel := e.get(fmt.Sprintf("t_rel0_%t", dup), store.StatePending)
		e.eqTime("RunAt of the released task", rel.RunAt, base)
		e.eq("EffectivePrio of the released task", rel.EffectivePrio, 0)
	}
}

// testOutcomeRetryZeroRunAt: a retry outcome without a RunAt means now: the
// task is pending again, due at Now.
func testOutcomeRetryZeroRunAt(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	o := failRetry(tk, time.Time{}, "E")
	now := base.Add(time.Second)
	e.mustRecord(now, o)
	got := e.get("t_1", store.StatePending)
	e.eqTime("RunAt", got.RunAt, now)
	e.eq("Attempt", got.Attempt, 1)
}

// testOutcomeOddIDs: an outcome whose task or lease id no task can have
// (not UTF-8, a NUL byte) is an outcome for an unknown task: ErrLeaseLost
// for that entry alone, and the rest of the batch applies.
func testOutcomeOddIDs(e *env) {
	ok := e.start(base, nt("t_ok", "a"))
	other := e.start(base, nt("t_other", "a"))
	badLease := succeed(other)
	badLease.LeaseID = other.LeaseID + "\xff"
	now := base.Add(time.Second)
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{
		succeed(ok),
		{TaskID: "t_\x00", LeaseID: "L", State: store.StateSucceeded},
		badLease,
		{TaskID: "t_\xfe", LeaseID: "L", State: store.StateDead, DeadReason: store.DeadMaxAttempts},
	}})
	e.noErr("RecordOutcomes", err)
	e.noErr("outcome of t_ok", errs[0])
	for i := 1; i < len(errs); i++ {
		e.isErr(fmt.Sprintf("outcome %d (odd id)", i), errs[i], store.ErrLeaseLost)
	}
	e.get("t_ok", store.StateSucceeded)
	e.get("t_other", store.StateRunning)
}

// testOutcomePriorityRange: a retry outcome whose effective priority does
// not fit in 32 bits (store.Fits32) is ErrInvalid for that entry alone.
func testOutcomePriorityRange(e *env) {
	ok := e.start(base, nt("t_ok", "a"))
	big := e.start(base, nt("t_big", "a"))
	o := failRetry(big, base.Add(time.Hour), "E")
	o.EffectivePrio = 1 << 31
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: base.Add(time.Second), Outcomes: []store.Outcome{succeed(ok), o}})
	e.noErr("RecordOutcomes", err)
	e.noErr("outcome of t_ok", errs[0])
	e.isErr("retry with priority 2^31", errs[1], store.ErrInvalid)
	e.get("t_ok", store.StateSucceeded)
	e.get("t_big", store.StateRunning)
}

// testOutcomeOddText: an error message cut inside a character or holding a
// NUL byte (a remote worker's, a handler's) is stored cleaned (see
// store.CleanText) and does not fail the other outcomes of its batch.
func testOutcomeOddText(e *env) {
	ok := e.start(base, nt("t_ok", "a"))
	odd := e.start(base, nt("t_odd", "a"))
	bad := kill(odd, "E\x00", store.DeadNonRetryable)
	bad.Error.Message, bad.Detail = "réponse coupée \xc3", "body\x00excerpt"
	retried := e.start(base, nt("t_retry", "a"))
	again := failRetry(retried, base.Add(time.Hour), "E")
	again.Error.Message = "\xff\xfe then text"
	now := base.Add(time.Second)
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{succeed(ok), bad, again}})
	e.noErr("RecordOutcomes", err)
	for i, err := range errs {
		e.noErr(fmt.Sprintf("outcome %d", i), err)
	}
	e.get("t_ok", store.StateSucceeded)
	dead := e.get("t_odd", store.StateDead)
	want := store.ErrorInfo{Code: "E\uFFFD", Message: "réponse coupée \uFFFD", Class: "permanent"}
	e.eq("last error of the dead task", *dead.LastError, want)
	as := e.attempts("t_odd")
	e.eq("attempts", len(as), 1)
	e.eq("history error", *as[0].Error, want)
	e.eq("history detail", as[0].Detail, "body\uFFFDexcerpt")
	e.get("t_retry", store.StateRetryWaiting)
	e.eq("retried task's history message", e.attempts("t_retry")[0].Error.Message, "\uFFFD then text")
}

func testOutcomeSucceeded(e *env) {
	t0, t1 := base, base.Add(1500*time.Millisecond)
	tk := e.start(t0, nt("t_1", "email"))
	e.mustRecord(t1, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateSucceeded,
		OutcomeKind: store.OutcomeSucceeded, Detail: "200 OK"})
	got := e.get("t_1", store.StateSucceeded)
	e.eqTime("UpdatedAt", got.UpdatedAt, t1)
	e.eq("Attempt", got.Attempt, 1)
	e.eq("LeaseID of a finished task", got.LeaseID, "")
	e.eq("LastError", got.LastError, (*store.ErrorInfo)(nil))
	e.eqTime("FirstFailureAt", got.FirstFailureAt, time.Time{})
	e.eq("attempts", e.attempts("t_1"), []store.Attempt{{TaskID: "t_1", TaskType: "email", Number: 1, WorkerID: worker,
		StartedAt: t0, FinishedAt: t1, Outcome: store.OutcomeSucceeded, Detail: "200 OK"}})
	// A second outcome under the same lease is refused.
	e.isErr("second outcome", e.record(t1, succeed(tk)), store.ErrLeaseLost)
}

func testOutcomeRetryWaiting(e *env) {
	n := nt("t_1", "email")
	n.Priority = 5
	t0, t1 := base, base.Add(time.Second)
	tk := e.start(t0, n)
	errInfo := &store.ErrorInfo{Code: "E_TIMEOUT", Message: "deadline exceeded", Class: "transient"}
	e.mustRecord(t1, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateRetryWaiting,
		RunAt: t1.Add(10 * time.Second), EffectivePrio: 3, Error: errInfo, LastDelay: 10 * time.Second,
		Detail: "stack trace", OutcomeKind: store.OutcomeFailed})
	got := e.get("t_1", store.StateRetryWaiting)
	e.eqTime("RunAt", got.RunAt, t1.Add(10*time.Second))
	e.eq("Priority", got.Priority, 5)
	e.eq("EffectivePrio", got.EffectivePrio, 3)
	e.eq("LastError", got.LastError, errInfo)
	e.eq("LastDelay", got.LastDelay, 10*time.Second)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, t1)
	e.eqTime("UpdatedAt", got.UpdatedAt, t1)
	e.eq("Attempt", got.Attempt, 1)
	e.eq("LeaseID", got.LeaseID, "")
	e.eqIDs("fetch while waiting", e.fetch(t1.Add(5*time.Second), 10))

	// Due: promoted, fetched again, fails again. FirstFailureAt stays.
	t2 := t1.Add(10 * time.Second)
	if n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: t2}); err != nil || n != 1 {
		e.t.Fatalf("PromoteDue = %d, %v; want 1", n, err)
	}
	tk2 := e.lease(t2, "t_1", "email")
	e.eq("Attempt of second run", tk2.Attempt, 2)
	t3 := t2.Add(time.Second)
	err2 := &store.ErrorInfo{Code: "E_500", Message: "server error", Class: "unknown"}
	e.mustRecord(t3, store.Outcome{TaskID: tk2.ID, LeaseID: tk2.LeaseID, State: store.StateRetryWaiting,
		RunAt: t3.Add(time.Minute), EffectivePrio: 2, Error: err2, LastDelay: time.Minute, OutcomeKind: store.OutcomeFailed})
	got = e.get("t_1", store.StateRetryWaiting)
	e.eqTime("FirstFailureAt after second failure", got.FirstFailureAt, t1)
	e.eq("LastError after second failure", got.LastError, err2)
	e.eq("attempts", e.attempts("t_1"), []store.Attempt{
		{TaskID: "t_1", TaskType: "email", Number: 1, WorkerID: worker, StartedAt: t0, FinishedAt: t1,
			Outcome: store.OutcomeFailed, Error: errInfo, Delay: 10 * time.Second, Detail: "stack trace"},
		{TaskID: "t_1", TaskType: "email", Number: 2, WorkerID: worker, StartedAt: t2, FinishedAt: t3,
			Outcome: store.OutcomeFailed, Error: err2, Delay: time.Minute},
	})
}

func testOutcomeRetryDueNow(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	now := base.Add(time.Second)
	e.mustRecord(now, failRetry(a, now, "E"))                   // RunAt == Now
	e.mustRecord(now, failRetry(b, now.Add(-time.Second), "E")) // RunAt before Now
	for _, id := range []string{"t_a", "t_b"} {
		got := e.get(id, store.StatePending)
		e.eqTime("FirstFailureAt", got.FirstFailureAt, now)
		e.eq("attempts", len(e.attempts(id)), 1)
	}
	e.eq("fetchable without promotion", len(e.fetch(now, 10)), 2)
}

func testOutcomeDead(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	errInfo := &store.ErrorInfo{Code: "E_400", Message: "bad request", Class: "permanent"}
	e.mustRecord(now, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateDead,
		DeadReason: store.DeadNonRetryable, Error: errInfo, OutcomeKind: store.OutcomeFailed, Detail: "body"})
	got := e.get("t_1", store.StateDead)
	e.eq("DeadReason", got.DeadReason, store.DeadNonRetryable)
	e.eq("LastError", got.LastError, errInfo)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, now)
	e.eqTime("UpdatedAt", got.UpdatedAt, now)
	e.eq("LeaseID", got.LeaseID, "")
	e.eq("attempts", e.attempts("t_1"), []store.Attempt{{TaskID: "t_1", TaskType: "a", Number: 1, WorkerID: worker,
		StartedAt: base, FinishedAt: now, Outcome: store.OutcomeFailed, Error: errInfo, Detail: "body"}})
}

func testOutcomeRelease(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	e.mustRecord(now, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StatePending})
	got := e.get("t_1", store.StatePending)
	e.eq("Attempt after release", got.Attempt, 0)
	e.eq("LeaseID after release", got.LeaseID, "")
	e.eqTime("UpdatedAt", got.UpdatedAt, now)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, time.Time{})
	e.eq("attempts after release", len(e.attempts("t_1")), 0)
	e.isErr("outcome under the released lease", e.record(now, succeed(tk)), store.ErrLeaseLost)
	again := e.lease(now, "t_1", "a")
	e.eq("Attempt", again.Attempt, 1)
	if again.LeaseID == tk.LeaseID {
		e.t.Fatal("lease id reused after release")
	}
}

// testReleaseKeepsLastError: a release changes nothing but the lease and
// the attempt count, even when it carries an error and a delay.
func testReleaseKeepsLastError(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	e.mustRecord(now, failRetry(tk, now, "E1")) // due at once: pending
	tk = e.lease(now, "t_1", "a")
	later := now.Add(time.Second)
	e.mustRecord(later, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StatePending,
		Error: &store.ErrorInfo{Code: "E_RELEASE", Message: "shutting down", Class: "unknown"}, LastDelay: time.Minute})
	got := e.get("t_1", store.StatePending)
	e.eq("Attempt after release", got.Attempt, 1)
	e.eq("LastError after release", got.LastError, &store.ErrorInfo{Code: "E1", Message: "failed: E1", Class: "transient"})
	e.eq("LastDelay after release", got.LastDelay, 10*time.Second)
	e.eqTime("FirstFailureAt after release", got.FirstFailureAt, now)
	e.eqTime("UpdatedAt", got.UpdatedAt, later)
	e.eq("history (the failure only)", len(e.attempts("t_1")), 1)
}

// testOutcomeDelayedRelease: a release with a RunAt after Now gives the
// lease back as a release does (the attempt not counted, no history, the
// last error, delay, priority and first failure kept), but the task waits
// as retry_waiting until RunAt, and the next wake-up names it.
func testOutcomeDelayedRelease(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	e.mustRecord(now, failRetry(tk, now, "E1")) // due at once: pending
	tk = e.lease(now, "t_1", "a")
	before := e.get("t_1", store.StateRunning)
	later, due := now.Add(time.Second), now.Add(time.Hour)
	e.mustRecord(later, store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StatePending, RunAt: due,
		EffectivePrio: before.EffectivePrio - 5, Error: &store.ErrorInfo{Code: "E_RELEASE", Message: "held", Class: "unknown"}, LastDelay: time.Minute})
	got := e.get("t_1", store.StateRetryWaiting)
	e.eq("Attempt after a delayed release", got.Attempt, 1)
	e.eqTime("RunAt", got.RunAt, due)
	e.eq("LeaseID", got.LeaseID, "")
	e.eq("EffectivePrio", got.EffectivePrio, before.EffectivePrio)
	e.eq("LastError", got.LastError, &store.ErrorInfo{Code: "E1", Message: "failed: E1", Class: "transient"})
	e.eq("LastDelay", got.LastDelay, 10*time.Second)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, now)
	e.eq("history (the failure only)", len(e.attempts("t_1")), 1)
	wk, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	e.eqTime("NextRunAt", wk.NextRunAt, due)
	e.eq("fetched before RunAt", len(e.fetch(later, 1, "a")), 0)
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: due})
	e.noErr("PromoteDue", err)
	e.eq("promoted at RunAt", n, 1)
	e.eq("Attempt of the next lease", e.lease(due, "t_1", "a").Attempt, 2)
}

func testOutcomeStaleLease(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	before := e.get("t_1", store.StateRunning)
	now := base.Add(time.Second)
	for _, st := range []store.State{store.StateSucceeded, store.StateRetryWaiting, store.StateDead, store.StatePending} {
		o := failRetry(tk, now.Add(time.Minute), "E")
		o.State, o.LeaseID, o.DeadReason = st, tk.LeaseID+"-stale", store.DeadMaxAttempts
		e.isErr("outcome "+string(st)+" under a wrong lease", e.record(now, o), store.ErrLeaseLost)
		o.LeaseID = ""
		e.isErr("outcome "+string(st)+" under an empty lease", e.record(now, o), store.ErrLeaseLost)
	}
	e.sameTask("task after refused outcomes", e.get("t_1", ""), before)
	e.eq("attempts", len(e.attempts("t_1")), 0)
	e.isErr("outcome for an unknown task", e.record(now, store.Outcome{TaskID: "nope", LeaseID: tk.LeaseID,
		State: store.StateSucceeded}), store.ErrLeaseLost)
	e.mustRecord(now, succeed(tk))
}

func testOutcomeExpiredLease(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	expiry := base.Add(leaseDur)
	e.eqTime("LeaseExpiresAt", a.LeaseExpiresAt, expiry)
	// At the expiry instant the lease is still current.
	e.mustRecord(expiry, succeed(a))
	// After it, only the reaper's outcome applies.
	late := expiry.Add(time.Millisecond)
	before := e.get("t_b", "")
	e.isErr("outcome after expiry", e.record(late, succeed(b)), store.ErrLeaseLost)
	e.sameTask("task after refused outcome", e.get("t_b", ""), before)
	reap := failRetry(b, late, "LEASE_EXPIRED")
	reap.ReapExpired, reap.OutcomeKind = true, store.OutcomeLeaseExpired
	reap.Error.Class = "lease_expired"
	e.mustRecord(late, reap)
	got := e.get("t_b", store.StatePending)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, late)
	as := e.attempts("t_b")
	e.eq("attempts", len(as), 1)
	e.eq("attempt outcome", as[0].Outcome, store.OutcomeLeaseExpired)
	e.eq("attempt error", as[0].Error, reap.Error)
	// The reaper cannot reap twice, nor the worker complete afterwards.
	e.isErr("second reap", e.record(late, reap), store.ErrLeaseLost)
	e.isErr("late completion", e.record(late, succeed(b)), store.ErrLeaseLost)
}

func testOutcomeCancelled(e *env) {
	tk := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	if _, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: "t_1", Now: now}); err != nil {
		e.t.Fatalf("CancelTask: %v", err)
	}
	e.isErr("outcome after cancel", e.record(now, succeed(tk)), store.ErrLeaseLost)
	reap := succeed(tk)
	reap.ReapExpired = true
	e.isErr("reaper outcome after cancel", e.record(now.Add(time.Hour), reap), store.ErrLeaseLost)
	e.get("t_1", store.StateCancelled)
	e.eq("attempts", len(e.attempts("t_1")), 0)
}

func testOutcomeMixedBatch(e *env) {
	var ts []store.Task
	for i := range 4 {
		ts = append(ts, e.start(base, nt(fmt.Sprintf("t_%d", i), "a")))
	}
	now := base.Add(time.Second)
	stale := succeed(ts[1])
	stale.LeaseID = "stale"
	bad := succeed(ts[3])
	bad.State = store.StateRunning
	outs := []store.Outcome{
		succeed(ts[0]),
		stale,
		{TaskID: "unknown", LeaseID: "x", State: store.StateSucceeded},
		kill(ts[2], "E", store.DeadMaxAttempts),
		succeed(ts[0]), // the same lease twice in one batch: the second is stale
		bad,            // not an outcome state
	}
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: outs, Now: now})
	e.noErr("RecordOutcomes", err)
	e.eq("errors", len(errs), len(outs))
	e.noErr("outcome 0", errs[0])
	e.isErr("outcome 1", errs[1], store.ErrLeaseLost)
	e.isErr("outcome 2", errs[2], store.ErrLeaseLost)
	e.noErr("outcome 3", errs[3])
	e.isErr("outcome 4", errs[4], store.ErrLeaseLost)
	if errs[5] == nil {
		e.t.Fatal("outcome with state running accepted")
	}
	e.get("t_0", store.StateSucceeded)
	e.get("t_1", store.StateRunning)
	e.get("t_2", store.StateDead)
	e.get("t_3", store.StateRunning)
	e.eq("attempts of t_0", len(e.attempts("t_0")), 1)
	e.eq("attempts of t_1", len(e.attempts("t_1")), 0)
}

// testReaperRace is the River #1302 scenario: the lease reaper and the
// worker race to record an outcome for the same lease; exactly one wins and
// the reaper never overwrites a completed task.
func testReaperRace(e *env) {
	// Completion first, then the reaper: refused.
	a := e.start(base, nt("t_a", "a"))
	e.mustRecord(base.Add(10*time.Second), succeed(a))
	reap := failRetry(a, base.Add(time.Hour), "LEASE_EXPIRED")
	reap.ReapExpired, reap.OutcomeKind = true, store.OutcomeLeaseExpired
	e.isErr("reaper after completion", e.record(base.Add(leaseDur+time.Second), reap), store.ErrLeaseLost)
	e.get("t_a", store.StateSucceeded)
	e.eq("attempts of t_a", len(e.attempts("t_a")), 1)

	// Reaper first, task leased again: the old lease is dead for everybody.
	b := e.start(base, nt("t_b", "b"))
	late := base.Add(leaseDur + time.Second)
	reap = failRetry(b, late, "LEASE_EXPIRED")
	reap.ReapExpired, reap.OutcomeKind = true, store.OutcomeLeaseExpired
	e.mustRecord(late, reap)
	b2 := e.lease(late, "t_b", "b")
	old := succeed(b)
	old.ReapExpired = true
	e.isErr("old lease after re-lease", e.record(late, old), store.ErrLeaseLost)
	e.isErr("old reaper after re-lease", e.record(late, reap), store.ErrLeaseLost)
	e.get("t_b", store.StateRunning)
	e.mustRecord(late, succeed(b2))

	// The reaper lists a lease just after it expired; the worker's heartbeat,
	// taken just before the expiry, extends it before the reaper writes. The
	// reap must then be refused: the worker still holds a valid lease.
	c := e.start(base, nt("t_c", "c"))
	expiry := c.LeaseExpiresAt
	listed, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: expiry.Add(time.Millisecond)})
	e.noErr("ExpiredLeases", err)
	e.eqIDs("listed by the reaper", listed, "t_c")
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: expiry.Add(-time.Millisecond), Leases: []store.LeaseRef{
		{TaskID: c.ID, LeaseID: c.LeaseID, ExpiresAt: expiry.Add(leaseDur)}}})
	e.noErr("ExtendLeases", err)
	e.noErr("heartbeat just before the expiry", errs[0])
	reap = failRetry(c, expiry.Add(time.Hour), "LEASE_EXPIRED")
	reap.ReapExpired, reap.OutcomeKind = true, store.OutcomeLeaseExpired
	e.isErr("reap of a lease extended since it was listed", e.record(expiry.Add(time.Millisecond), reap), store.ErrLeaseLost)
	e.get("t_c", store.StateRunning)
	e.mustRecord(expiry.Add(time.Second), succeed(c))
	e.eq("attempts of t_c", len(e.attempts("t_c")), 1)

	// Truly concurrent: per task, the worker completes at the expiry instant
	// while the reaper reaps just after it.
	const n = 40
	var tasks []store.Task
	for i := range n {
		e.insert(base, nt(fmt.Sprintf("r_%02d", i), "race"))
	}
	tasks = e.fetch(base, n, "race")
	e.eq("fetched", len(tasks), n)
	var wg sync.WaitGroup
	workerErr := make([]error, n)
	reaperErr := make([]error, n)
	callErr := make(chan error, 2*n)
	for i, t := range tasks {
		wg.Go(func() {
			errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: []store.Outcome{succeed(t)}, Now: t.LeaseExpiresAt})
			if err != nil {
				callErr <- err
				return
			}
			workerErr[i] = errs[0]
		})
		wg.Go(func() {
			r := failRetry(t, base.Add(time.Hour), "LEASE_EXPIRED")
			r.ReapExpired, r.OutcomeKind = true, store.OutcomeLeaseExpired
			errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: []store.Outcome{r}, Now: t.LeaseExpiresAt.Add(time.Millisecond)})
			if err != nil {
				callErr <- err
				return
			}
			reaperErr[i] = errs[0]
		})
	}
	wg.Wait()
	close(callErr)
	for err := range callErr {
		e.noErr("RecordOutcomes", err)
	}
	for i, t := range tasks {
		w, r := workerErr[i], reaperErr[i]
		if (w == nil) == (r == nil) {
			e.t.Fatalf("task %s: worker error %v, reaper error %v: want exactly one winner", t.ID, w, r)
		}
		want := store.StateSucceeded
		if w != nil {
			e.isErr("loser", w, store.ErrLeaseLost)
			want = store.StateRetryWaiting
		} else {
			e.isErr("loser", r, store.ErrLeaseLost)
		}
		e.get(t.ID, want)
		e.eq("attempts of "+t.ID, len(e.attempts(t.ID)), 1)
	}
}
