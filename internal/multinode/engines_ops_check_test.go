package multinode

// The checks of TestEnginesUnderUserOperations: each task's audited
// transitions against the task lifecycle (docs/architecture.md), its
// history against its attempts, the handler runs against the history, and
// the test's operations against the transitions they explain.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// check reads the audit, every task and its history, and checks them.
func (m *opsModel) check(t *testing.T, ctx context.Context, st *postgres.Store) opsTotals {
	audit, err := readAudit(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.reportViolations(t)
	f := &failures{t: t}
	fail := f.fail
	tot := opsTotals{cancelledFrom: map[string]int{}}
	retriedOK, retriedUnsure := 0, 0
	for _, id := range ids {
		task, err := st.GetTask(ctx, id)
		gone := errors.Is(err, store.ErrNotFound)
		if err != nil && !gone {
			t.Fatalf("get task %s: %v", id, err)
		}
		var hist []store.Attempt
		if !gone {
			if hist, err = st.ListAttempts(ctx, id); err != nil {
				t.Fatalf("attempts of %s: %v", id, err)
			}
		}
		m.checkTask(id, task, gone, hist, audit[id], &tot, fail)
		r := m.retries[id]
		retriedOK += r[0]
		retriedUnsure += r[1]
	}
	// The test's operations explain every manual move, and nothing else
	// made one.
	retried := tot.deadRetried + tot.cancelledRetried
	if lo, hi := retriedOK+m.redrives[0], retriedOK+retriedUnsure+m.redrives[0]+m.redrives[1]; retried < lo || retried > hi {
		fail("%d dead or cancelled tasks put back to pending; the test's retries and redrives explain %d to %d", retried, lo, hi)
	}
	if tot.deleted < m.purges[0] || tot.deleted > m.purges[0]+m.purges[1] {
		fail("%d tasks deleted; the test's purges explain %d to %d", tot.deleted, m.purges[0], m.purges[0]+m.purges[1])
	}
	f.flush()
	return tot
}

// checkTask walks one task's audit through the lifecycle, then checks its
// history and its runs against the attempts it found.
func (m *opsModel) checkTask(id string, task store.Task, gone bool, hist []store.Attempt, evs []opsEvent, tot *opsTotals,
	fail func(string, ...any)) {
	script := m.scripts[m.ids[id]]
	typ := m.typeOf[id]
	if len(evs) == 0 {
		fail("task %s: no audit", id)
		return
	}
	var atts []*opsAttempt
	var cur *opsAttempt
	state, att := "", 0
	cancelled, cancelRetried, deadRetried := 0, 0, 0
	for i := range evs {
		e := &evs[i]
		switch e.op {
		case "INSERT":
			if i != 0 {
				fail("task %s: inserted at audit row %d", id, i)
			}
			switch {
			case e.newState == "running" && e.newAtt == 1:
				cur = &opsAttempt{number: 1, started: e.newStarted, lease: e.newLease, begun: e.at}
				atts = append(atts, cur)
			case (e.newState == "scheduled" || e.newState == "pending") && e.newAtt == 0:
			default:
				fail("task %s: inserted %s at attempt %d", id, e.newState, e.newAtt)
			}
			state, att = e.newState, e.newAtt
			continue
		case "DELETE":
			if e.oldState != "dead" || i != len(evs)-1 {
				fail("task %s: deleted in state %s (audit row %d of %d)", id, e.oldState, i, len(evs))
			}
			tot.deleted++
			state = "deleted"
			continue
		}
		if e.oldState != state || e.oldAttempt != att {
			fail("task %s: audit row %d moves %s/%d, but the task was %s/%d", id, i, e.oldState, e.oldAttempt, state, att)
		}
		from, to := e.oldState, e.newState
		same := e.newAtt == e.oldAttempt
		switch {
		case from == "pending" && to == "running":
			if e.newAtt != e.oldAttempt+1 {
				fail("task %s: leased at attempt %d after attempt %d", id, e.newAtt, e.oldAttempt)
			}
			cur = &opsAttempt{number: e.newAtt, started: e.newStarted, lease: e.newLease, begun: e.at}
			atts = append(atts, cur)
		case from == "running" && cur != nil &&
			((same && (to == "succeeded" || to == "dead" || to == "cancelled" || to == "retry_waiting" || to == "pending")) ||
				(e.newAtt == e.oldAttempt-1 && (to == "pending" || to == "retry_waiting"))):
			cur.end, cur.counted = e, same
			if to == "cancelled" {
				cancelled++
				tot.cancelledFrom[from]++
			}
			cur = nil
		case (from == "scheduled" || from == "retry_waiting") && to == "pending" && same:
		case (from == "scheduled" || from == "pending" || from == "retry_waiting") && to == "cancelled" && same:
			cancelled++
			tot.cancelledFrom[from]++
		case (from == "dead" || from == "cancelled") && to == "pending" && e.newAtt == 0:
			if from == "dead" {
				deadRetried++
			} else {
				cancelRetried++
			}
		default:
			fail("task %s: illegal transition %s/%d -> %s/%d (lease %q -> %q) at audit row %d", id, from, e.oldAttempt, to,
				e.newAtt, e.oldLease, e.newLease, i)
		}
		state, att = to, e.newAtt
	}
	tot.deadRetried += deadRetried
	tot.cancelledRetried += cancelRetried
	if c := m.cancels[id]; cancelled < c[0] || cancelled > c[0]+c[1] {
		fail("task %s: cancelled %d times; the test's cancels explain %d to %d", id, cancelled, c[0], c[0]+c[1])
	}
	if r := m.retries[id]; cancelRetried > r[0]+r[1] {
		fail("task %s: retried from cancelled %d times; the test retried it %d times (%d unsure)", id, cancelRetried, r[0], r[1])
	}
	if r := m.retries[id]; deadRetried+cancelRetried < r[0] {
		fail("task %s: retried %d times, but %d of the test's retries succeeded", id, deadRetried+cancelRetried, r[0])
	}
	if gone != (state == "deleted") {
		fail("task %s: gone %v, but its audit ends %s", id, gone, state)
	}
	if gone {
		return
	}
	if string(task.State) != state || task.Attempt != att {
		fail("task %s: %s at attempt %d, but its audit ends %s/%d", id, task.State, task.Attempt, state, att)
	}
	if !task.State.Terminal() {
		fail("task %s: left %s after the drain", id, task.State)
	}
	m.checkAttempts(id, typ, script, hist, atts, tot, fail)
}

// checkAttempts checks a task's history against its audited attempts, the
// decision of each attempt against the script and the policy in force, and
// the runs against both.
func (m *opsModel) checkAttempts(id, typ string, script []string, hist []store.Attempt, atts []*opsAttempt, tot *opsTotals,
	fail func(string, ...any)) {
	var want []*opsAttempt
	for _, a := range atts {
		switch {
		case a.end == nil:
			fail("task %s: attempt %d never ended", id, a.number)
		case !a.counted:
			tot.released++
		case a.end.newState != "cancelled":
			want = append(want, a)
		}
	}
	if len(hist) != len(want) {
		fail("task %s (%s %v): history %s, but the audit shows %d recorded attempts", id, typ, script, histString(hist), len(want))
		return
	}
	runs := m.runs[id]
	for k, h := range hist {
		a := want[k]
		tot.attempts++
		if h.Number != a.number || h.StartedAt.UnixMicro() != a.started.UnixMicro() {
			fail("task %s: history row %d is attempt %d started %s; the audit's attempt %d started %s", id, k, h.Number,
				h.StartedAt.Format(time.StampMicro), a.number, a.started.Format(time.StampMicro))
			continue
		}
		act := scriptAction(script, a.number)
		end := a.end
		if (h.Outcome == store.OutcomeSucceeded) != (end.newState == "succeeded") {
			fail("task %s attempt %d: recorded %s but the task moved to %s", id, a.number, h.Outcome, end.newState)
		}
		run := m.matchRun(runs, typ, h)
		switch {
		case h.Outcome == store.OutcomeLeaseExpired:
			tot.reaped++
		case run == nil:
			fail("task %s attempt %d (%s, %s): no handler run of it was observed", id, a.number, act, h.Outcome)
		case opsSucceeds(run.action) != (h.Outcome == store.OutcomeSucceeded):
			fail("task %s attempt %d: run action %s, recorded %s", id, a.number, run.action, h.Outcome)
		}
		if run != nil {
			act = run.action // what the run did ("aborted": a hold whose context ended)
		}
		lo, hi := m.maxAttemptsAt(typ, end.at)
		switch {
		case end.newState == "succeeded":
			if !opsSucceeds(act) {
				fail("task %s attempt %d: succeeded, script says %s", id, a.number, act)
			}
		case end.newState == "dead" && end.newReason == store.DeadNonRetryable:
			if act != opsPerm || h.Outcome != store.OutcomeFailed {
				fail("task %s attempt %d: dead non_retryable after %s (%s)", id, a.number, h.Outcome, act)
			}
		case end.newState == "dead" && end.newReason == store.DeadMaxAttempts:
			if a.number < lo || (act == opsPerm && h.Outcome == store.OutcomeFailed) || opsSucceeds(act) && h.Outcome != store.OutcomeLeaseExpired {
				fail("task %s attempt %d: dead max_attempts (%s, %s) while the max attempts were %d to %d", id, a.number, act,
					h.Outcome, lo, hi)
			}
		case end.newState == "dead":
			fail("task %s attempt %d: dead %q", id, a.number, end.newReason)
		default: // retried
			if a.number >= hi || (act == opsPerm && h.Outcome == store.OutcomeFailed) {
				fail("task %s attempt %d: retried (%s, %s) while the max attempts were %d to %d", id, a.number, act, h.Outcome, lo, hi)
			}
			wantDelay := opsDelay
			if act == opsAfter && h.Outcome == store.OutcomeFailed {
				wantDelay = opsRetryAfter
			}
			if h.Delay != wantDelay {
				fail("task %s attempt %d (%s, %s): delay %s, want %s", id, a.number, act, h.Outcome, h.Delay, wantDelay)
			}
		}
	}
	// Every run ran an attempt the store leased, and every run whose
	// outcome should have been recorded is in the history.
	for _, r := range runs {
		if !m.leasedBy(r, atts) {
			fail("task %s: %s run of attempt %d at %s matches no lease of the task", id, r.typ, r.attempt, r.start.Format(time.StampMicro))
		}
		if r.used {
			continue
		}
		excused := func(o *modelRun) bool {
			return m.cutNear(o) || m.closingNear(o) || m.touchedSince(id, o.start) || m.outcomeDropped(o)
		}
		if why := r.unrecorded(excused); why != "" {
			fail("task %s attempt %d: %s run on %q (%s) ended at %s, %s, but no history row has it (%s)", id, r.attempt, r.typ,
				r.node, r.action, r.end.Format(time.StampMicro), why, auditEnd(r, atts))
		}
	}
}

// auditEnd says, for a failure's message, how the audit ended the attempt
// an in-process or pull run ran.
func auditEnd(r *modelRun, atts []*opsAttempt) string {
	for _, a := range atts {
		if r.typ == opsTypePush || a.number != r.attempt || a.started.UnixMicro() != r.startedAt.UnixMicro() {
			continue
		}
		if a.end == nil {
			return "the audit shows its attempt never ended"
		}
		e := a.end
		return fmt.Sprintf("the audit shows its attempt ended %s/%d -> %s/%d at %s", e.oldState, e.oldAttempt, e.newState, e.newAtt,
			e.at.Local().Format(time.StampMicro))
	}
	return "the audit shows no such attempt"
}

// matchRun finds the run of a history row and marks it used: the run
// that read the attempt's start (in process, pull: runOf), or for a push
// the unused delivery of its number that arrived closest to its start
// within the attempt's time.
func (m *opsModel) matchRun(runs []*modelRun, typ string, h store.Attempt) *modelRun {
	if typ != opsTypePush {
		return runOf(runs, h)
	}
	var best *modelRun
	for _, r := range runs {
		if r.used || r.attempt != h.Number {
			continue
		}
		if r.start.Before(h.StartedAt.Add(-opsRunOverlap)) || r.start.After(h.FinishedAt.Add(opsRunOverlap)) {
			continue
		}
		if best == nil || absDur(r.start.Sub(h.StartedAt)) < absDur(best.start.Sub(h.StartedAt)) {
			best = r
		}
	}
	if best != nil {
		best.used = true
	}
	return best
}

// leasedBy reports whether a run ran one of the task's audited attempts.
func (m *opsModel) leasedBy(r *modelRun, atts []*opsAttempt) bool {
	for _, a := range atts {
		if a.number != r.attempt {
			continue
		}
		if r.typ != opsTypePush {
			if a.started.UnixMicro() == r.startedAt.UnixMicro() {
				return true
			}
			continue
		}
		if !r.start.Before(a.begun.Add(-opsRunOverlap)) && (a.end == nil || !r.start.After(a.end.at.Add(opsRunOverlap))) {
			return true
		}
	}
	return false
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
