package multinode

// The model of TestEnginesRestartedAtRandom: each task's script, what the
// test did to it, and every handler run as the handler saw it; and the
// checks of the final database against them.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// The scripted actions of a task, one per attempt (the last one repeats).
const (
	mnOK      = actOK     // succeed
	mnFail    = actFail   // fail transiently
	mnPerm    = actPerm   // fail permanently
	mnPanic   = "panic"   // panic (in process only)
	mnAfter   = actAfter  // fail with Retry-After mnRetryAfter
	mnSlow    = "slow"    // ignore the context for mnSlowFor, then succeed (in process only)
	mnAbandon = "abandon" // lease and never report, report too late (pull only)
	mnBeat    = "beat"    // heartbeat through other nodes past the first expiry, then succeed (pull only)
)

const (
	mnTypeLocal   = "mn.local" // run by in-process workers
	mnTypePull    = "mn.pull"  // run by pull workers (engine.Lease, Complete, Fail)
	mnMaxAttempts = 4
	mnDelay       = 40 * time.Millisecond  // fixed backoff
	mnMaxDelay    = 300 * time.Millisecond // caps Retry-After
	mnRetryAfter  = 150 * time.Millisecond
	// mnLease is the in-process leases' duration, heartbeated every third.
	// The lease watchdog stops a handler a tenth of it before its expiry
	// (engine.watchdogMargin): that margin is all a node that is neither
	// cut nor closing has against its own timers firing late, so it must
	// cover a loaded machine's scheduling delays. With 1 s (a 100 ms
	// margin) a starved -race run at load 15 had a handler return with
	// its context live 15 ms past its lease, its heartbeats and watchdog
	// both late.
	mnLease     = 3 * time.Second
	mnPullLease = 300 * time.Millisecond // pull leases, never heartbeated
	// mnSlowFor outlives a lease: only heartbeats keep a slow handler's.
	mnSlowFor = mnLease * 3 / 2
	// mnFreezeMin is the shortest freeze of a node's connections (the
	// longest is twice it): longer than a lease, so that the frozen node's
	// leases run out under its handlers.
	mnFreezeMin    = mnLease * 3 / 2
	mnGrace        = 100 * time.Millisecond // workers' shutdown grace
	mnLeaderTTL    = engine.MinLeaderTTL
	mnTakeoverWait = mnLeaderTTL + mnLeaderTTL/4 + 5*time.Second // bound plus slack for a loaded machine (see restart)
)

var mnLocalScripts = [][]string{
	{mnOK}, {mnOK}, {mnOK}, {mnFail, mnOK}, {mnFail, mnFail, mnOK}, {mnFail, mnFail, mnFail, mnFail},
	{mnPerm}, {mnPanic, mnOK}, {mnAfter, mnOK}, {mnFail, mnPanic, mnAfter, mnOK},
}

var mnPullScripts = [][]string{
	{mnOK}, {mnFail, mnOK}, {mnAbandon, mnOK}, {mnAbandon, mnAbandon, mnAbandon, mnAbandon}, {mnPerm},
	{mnBeat}, {mnAfter, mnBeat},
}

// mnRetryScript is every task's script after the test retried it.
var mnRetryScript = []string{mnFail, mnOK}

// mnModel is the test's record of the scripts, its own operations and the
// runs (modelBook: the tasks' ids, the runs, the violations; its mu
// guards the rest too).
type mnModel struct {
	modelBook
	byIndex    [][]string
	pullIndex  map[int]bool
	epoch      map[string]int
	cancelled  map[string]bool      // cancelled by the test, not retried since
	cancelList []string             // cancelled by the test, candidates for a retry
	touchedAt  map[string]time.Time // last cancel or retry by the test
	touched    map[string]bool
	deadRetry  int
	cuts       map[string][]time.Time // by node: when the test cut its connections
}

func newModel() *mnModel {
	m := &mnModel{pullIndex: map[int]bool{}, epoch: map[string]int{}, cancelled: map[string]bool{},
		touchedAt: map[string]time.Time{}, touched: map[string]bool{}, cuts: map[string][]time.Time{}}
	m.initBook(30)
	return m
}

// actionOf returns what the next run of t will do, as begin decides it.
func (m *mnModel) actionOf(t *store.Task) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scriptOf(t)
}

// scriptOf returns the action of t's attempt, or "" when its payload names
// no script. m.mu is held.
func (m *mnModel) scriptOf(t *store.Task) string {
	var p struct{ I int }
	if err := json.Unmarshal(t.Payload, &p); err != nil || p.I < 0 || p.I >= len(m.byIndex) {
		return ""
	}
	if m.epoch[t.ID] > 0 {
		return scriptAction(mnRetryScript, t.Attempt)
	}
	return scriptAction(m.byIndex[p.I], t.Attempt)
}

// begin records the start of a run of t and checks that no other run of
// the task still holds a valid lease (modelRun.holdsLease), unless the
// test cancelled the task since that run started (the cancellation ends
// the lease in the store at once) or, for an in-process run, cut its
// node's connections near it (a live node's heartbeats keep its leases
// unless the test cut its connections: then the lease may expire before
// the node's watchdog, a timer in a starved process, stops the run).
func (m *mnModel) begin(ctx context.Context, node string, pull bool, t *store.Task) *modelRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	var p struct{ I int }
	idx := -1
	if err := json.Unmarshal(t.Payload, &p); err == nil && p.I >= 0 && p.I < len(m.byIndex) {
		idx = p.I
	}
	typ := mnTypeLocal
	if pull {
		typ = mnTypePull
	}
	r := &modelRun{task: t.ID, typ: typ, node: node, pull: pull, epoch: m.epoch[t.ID], attempt: t.Attempt, leaseID: t.LeaseID,
		startedAt: t.StartedAt, expires: t.LeaseExpiresAt, ctx: ctx, action: m.scriptOf(t)}
	if r.action == "" {
		m.violate("task %s: payload %s names no script", t.ID, t.Payload)
		r.action = mnPerm
	}
	if idx >= 0 && m.pullIndex[idx] != pull {
		m.violate("task %s (pull %v) ran on a worker with pull %v", t.ID, m.pullIndex[idx], pull)
	}
	m.startRun(r, func(o *modelRun) bool {
		if at, ok := m.touchedAt[t.ID]; ok && !at.Before(o.start) {
			return true // cancelled by the test since o started: o's lease is gone
		}
		return !o.pull && m.cutNear(o)
	})
	return r
}

// markClosing notes that node began to close: its runs may be stopped.
func (m *mnModel) markClosing(node string) { m.mark(node, func(r *modelRun) { r.closing = true }) }

// markCut notes that node's connections were cut now.
func (m *mnModel) markCut(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cuts[node] = append(m.cuts[node], time.Now())
}

// cutNear reports whether r's node had its connections cut within a lease
// of r: its outcome may then miss its lease (a commit is retried only
// within the lease, and the pool reconnects meanwhile). m.mu is held.
func (m *mnModel) cutNear(r *modelRun) bool {
	for _, at := range m.cuts[r.node] {
		if !at.Before(r.start.Add(-mnLease)) && (r.end.IsZero() || at.Before(r.end.Add(mnLease))) {
			return true
		}
	}
	return false
}

func (m *mnModel) mark(node string, f func(*modelRun)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, as := range m.active {
		for _, r := range as {
			if r.node == node {
				f(r)
			}
		}
	}
}

// handlerError is the in-process handler's answer for an action.
func handlerError(ctx context.Context, action string) error {
	switch action {
	case mnPanic:
		panic("scripted panic")
	case mnSlow:
		time.Sleep(mnSlowFor) // ignores ctx on purpose: it outlives its lease if its node closes
		return nil
	}
	if err, ok := scriptedError(action, mnRetryAfter); ok {
		return err
	}
	return fmt.Errorf("unexpected action %q", action)
}

// check compares every task with its script, the test's operations and the
// runs observed; reaps holds the lease expiry of each reaped attempt as the
// store held it when the reaper took it (watchReaps). Each task's reads
// are bounded on their own; ctx bounds none of them as a whole.
func (m *mnModel) check(t *testing.T, ctx context.Context, st store.Store, reaps map[reapKey]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.reportViolations(t)
	f := &failures{t: t}
	fail := f.fail
	var reaped, missed int
	for _, id := range ids {
		idx := m.ids[id]
		// Each task's reads on their own bound: all of them take over a
		// minute on a loaded machine under -race.
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		task, err := st.GetTask(tctx, id)
		if err != nil {
			cancel()
			t.Fatalf("get task %s: %v", id, err)
		}
		hist, err := st.ListAttempts(tctx, id)
		cancel()
		if err != nil {
			t.Fatalf("attempts of %s: %v", id, err)
		}
		if task.LeaseID != "" || task.State == store.StateRunning {
			fail("task %s: left %s with lease %q", id, task.State, task.LeaseID)
		}
		script := m.byIndex[idx]
		if m.epoch[id] > 0 {
			script = mnRetryScript
		}
		if m.cancelled[id] {
			if task.State != store.StateCancelled {
				fail("task %s: cancelled by the test, but %s", id, task.State)
			}
			continue
		}
		if m.touched[id] {
			// Retried by the test: runs mnRetryScript from attempt 1,
			// whatever the earlier epochs left in the history.
			if task.State != store.StateSucceeded {
				fail("task %s: retried by the test (epoch %d), then %s (attempt %d); want succeeded", id, m.epoch[id], task.State, task.Attempt)
			}
			continue
		}
		// Never touched by the test: the history is exactly its attempts.
		runs := m.runs[id]
		if len(hist) != task.Attempt || len(hist) == 0 {
			fail("task %s (%v): attempt %d but history %s", id, script, task.Attempt, histString(hist))
			continue
		}
		for k, a := range hist {
			act := scriptAction(script, k+1)
			if a.Number != k+1 {
				fail("task %s: history row %d numbered %d", id, k, a.Number)
			}
			run := runOf(runs, a)
			if a.Outcome == store.OutcomeLeaseExpired {
				reaped++
				if run != nil && run.end.IsZero() {
					fail("task %s attempt %d: reaped while its handler on %s still runs", id, a.Number, run.node)
				} else if run != nil && !run.pull && !run.ctxDone && !run.closing && !m.cutNear(run) {
					if m.outcomeMissedLease(run, id, a, reaps, fail) {
						missed++
					}
				}
				continue
			}
			if run == nil {
				fail("task %s attempt %d (%s on %s): no handler run of it was observed", id, a.Number, a.Outcome, a.WorkerID)
				continue
			}
			if run.action != act {
				fail("task %s attempt %d: run action %s, script says %s", id, a.Number, run.action, act)
			}
			want := store.OutcomeFailed
			if act == mnOK || act == mnSlow || act == mnBeat {
				want = store.OutcomeSucceeded
			}
			if a.Outcome != want {
				fail("task %s attempt %d (%s): recorded %s, want %s", id, a.Number, act, a.Outcome, want)
			}
			if act == mnAfter && a.Delay != mnRetryAfter && k+1 < mnMaxAttempts {
				fail("task %s attempt %d: Retry-After %s, but delay %s recorded", id, a.Number, mnRetryAfter, a.Delay)
			}
			if k+1 < len(hist) && (a.Outcome == store.OutcomeSucceeded || act == mnPerm) {
				fail("task %s: attempt %d ended it (%s, %s), yet attempts follow: %s", id, a.Number, act, a.Outcome, histString(hist))
			}
		}
		// Every run that returned normally, with its lease, is in the
		// history; others (stopped at a close, lease lost, its outcome
		// dropped as its node logged) are not.
		for _, r := range runs {
			if r.used || r.epoch != 0 || (r.pull && r.action == mnAbandon) {
				continue
			}
			if why := r.unrecorded(func(o *modelRun) bool { return o.closing || m.cutNear(o) || m.outcomeDropped(o) }); why != "" {
				fail("task %s attempt %d: %s run on %q (%s) ended, %s, but no history row has it", id, r.attempt, r.typ, r.node,
					r.action, why)
			}
		}
		last := hist[len(hist)-1]
		lastAct := scriptAction(script, len(hist))
		switch {
		case task.State == store.StateSucceeded:
			if last.Outcome != store.OutcomeSucceeded {
				fail("task %s: succeeded, but its last attempt %s", id, last.Outcome)
			}
		case task.State == store.StateDead && task.DeadReason == store.DeadNonRetryable:
			if last.Outcome != store.OutcomeFailed || lastAct != mnPerm {
				fail("task %s: dead non_retryable after %s (%s)", id, last.Outcome, lastAct)
			}
		case task.State == store.StateDead && task.DeadReason == store.DeadMaxAttempts:
			if task.Attempt != mnMaxAttempts || last.Outcome == store.OutcomeSucceeded || lastAct == mnPerm {
				fail("task %s: dead max_attempts after %d attempts, last %s (%s)", id, task.Attempt, last.Outcome, lastAct)
			}
		default:
			fail("task %s (%v): ended %s %q after %s", id, script, task.State, task.DeadReason, histString(hist))
		}
	}
	f.flush()
	t.Logf("%d tasks; %d reaped attempts among untouched tasks (%d of them finished, their outcome not recorded in time), %d cancelled by the test, %d dead retried",
		len(ids), reaped, missed, len(m.cancelled), m.deadRetry)
}

// outcomeMissedLease checks a reaped attempt whose in-process handler
// returned with its context live: its node believed it held the lease
// then. That is no run past the lease when the handler returned before the
// lease's expiry as the store held it when the reaper took it, and the
// node logged the outcome as not recorded: its commit failed (bounded by
// the lease duration) or came after the expiry (the heartbeats, which keep
// a finished attempt's lease until its outcome commits, failed as well on
// a database that slow), or the worker found the lease lost after the
// handler returned and dropped the outcome (engines_outcome_test.go). The
// reaper then retries the task: at least once, as designed. It reports
// whether the attempt is such a one; otherwise it calls fail. m.mu is
// held.
func (m *mnModel) outcomeMissedLease(run *modelRun, id string, a store.Attempt, reaps map[reapKey]time.Time, fail func(string, ...any)) bool {
	exp, ok := reaps[reapKey{task: id, attempt: a.Number, started: a.StartedAt.UnixMicro()}]
	switch {
	case !ok:
		fail("task %s attempt %d: handler on %s returned (%s) with its context live, yet the attempt was reaped, and no lease expiry was noted for the reap",
			id, a.Number, run.node, run.action)
	case !run.end.Before(exp):
		fail("task %s attempt %d: handler on %s returned (%s) at %s with its context live, after its lease expired at %s (reaped at %s)",
			id, a.Number, run.node, run.action, run.end.Format(time.StampMicro), exp.Local().Format(time.StampMicro),
			a.FinishedAt.Local().Format(time.StampMicro))
	case m.loggedLost(run, msgOutcomeFailed, msgOutcomeRefused, msgStoppedLeaseLost, msgReturnedLeaseLost) == "":
		fail("task %s attempt %d: handler on %s returned (%s) with its context live at %s, before its lease expired at %s, yet the attempt was reaped and the node did not log its outcome as not recorded",
			id, a.Number, run.node, run.action, run.end.Format(time.StampMicro), exp.Local().Format(time.StampMicro))
	default:
		return true
	}
	return false
}
