package multinode

// The model of TestEnginesRestartedAtRandom: each task's script, what the
// test did to it, and every handler run as the handler saw it; and the
// checks of the final database against them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// The scripted actions of a task, one per attempt (the last one repeats).
const (
	mnOK      = "ok"      // succeed
	mnFail    = "fail"    // fail transiently
	mnPerm    = "perm"    // fail permanently
	mnPanic   = "panic"   // panic (in process only)
	mnAfter   = "after"   // fail with Retry-After mnRetryAfter
	mnSlow    = "slow"    // ignore the context for mnSlowFor, then succeed (in process only)
	mnAbandon = "abandon" // lease and never report, report too late (pull only)
	mnBeat    = "beat"    // heartbeat through other nodes past the first expiry, then succeed (pull only)
)

const (
	mnTypeLocal    = "mn.local" // run by in-process workers
	mnTypePull     = "mn.pull"  // run by pull workers (engine.Lease, Complete, Fail)
	mnMaxAttempts  = 4
	mnDelay        = 40 * time.Millisecond  // fixed backoff
	mnMaxDelay     = 300 * time.Millisecond // caps Retry-After
	mnRetryAfter   = 150 * time.Millisecond
	mnLease        = time.Second            // in-process leases, heartbeated every third
	mnPullLease    = 300 * time.Millisecond // pull leases, never heartbeated
	mnSlowFor      = 1500 * time.Millisecond
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

func mnAction(script []string, attempt int) string {
	return script[min(max(attempt, 1), len(script))-1]
}

// mnRun is one handler run (in process or pull).
type mnRun struct {
	task      string
	node      string
	pull      bool
	epoch     int
	attempt   int
	leaseID   string
	startedAt time.Time // the attempt's start as stored (Task.StartedAt)
	expires   time.Time // pull: the lease's expiry (never extended)
	action    string
	ctx       context.Context // in process: the handler's context
	start     time.Time
	end       time.Time // zero while running
	ctxDone   bool      // in process: the context was done when the handler returned
	reported  error     // pull: what Complete or Fail answered
	reporting bool      // pull: Complete or Fail was called: the lease may end before it answers
	closing   bool      // the run's engine began to close while it ran
}

// mnModel is the test's record of the scripts, its own operations and the
// runs.
type mnModel struct {
	mu         sync.Mutex
	byIndex    [][]string
	pullIndex  map[int]bool
	ids        map[string]int // task id -> index
	epoch      map[string]int
	cancelled  map[string]bool      // cancelled by the test, not retried since
	cancelList []string             // cancelled by the test, candidates for a retry
	touchedAt  map[string]time.Time // last cancel or retry by the test
	touched    map[string]bool
	deadRetry  int
	active     map[string][]*mnRun
	runs       map[string][]*mnRun
	violations []string
	cuts       map[string][]time.Time // by node: when the test cut its connections
	// outcomeLost holds the in-process outcomes a node logged as not
	// recorded (outcomeLog), with the message.
	outcomeLost map[outcomeKey]string
}

func newModel() *mnModel {
	return &mnModel{pullIndex: map[int]bool{}, ids: map[string]int{}, epoch: map[string]int{}, cancelled: map[string]bool{},
		touchedAt: map[string]time.Time{}, touched: map[string]bool{}, active: map[string][]*mnRun{}, runs: map[string][]*mnRun{},
		cuts: map[string][]time.Time{}, outcomeLost: map[outcomeKey]string{}}
}

func (m *mnModel) violate(format string, args ...any) {
	// m.mu is held.
	if len(m.violations) < 30 {
		m.violations = append(m.violations, fmt.Sprintf(format, args...))
	}
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
		return mnAction(mnRetryScript, t.Attempt)
	}
	return mnAction(m.byIndex[p.I], t.Attempt)
}

// begin records the start of a run of t and checks that no other run of
// the task still holds a valid lease: an in-process run whose context is
// not done (its node believes it holds the lease, and heartbeats keep it
// unless the test cut the node's connections), or a pull run whose lease
// has not expired, unless the test cancelled the task since that run
// started (the cancellation ends the lease in the store at once).
func (m *mnModel) begin(ctx context.Context, node string, pull bool, t *store.Task) *mnRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	var p struct{ I int }
	idx := -1
	if err := json.Unmarshal(t.Payload, &p); err == nil && p.I >= 0 && p.I < len(m.byIndex) {
		idx = p.I
	}
	r := &mnRun{task: t.ID, node: node, pull: pull, epoch: m.epoch[t.ID], attempt: t.Attempt, leaseID: t.LeaseID,
		startedAt: t.StartedAt, expires: t.LeaseExpiresAt, ctx: ctx, start: time.Now(), action: m.scriptOf(t)}
	if r.action == "" {
		m.violate("task %s: payload %s names no script", t.ID, t.Payload)
		r.action = mnPerm
	}
	if idx >= 0 && m.pullIndex[idx] != pull {
		m.violate("task %s (pull %v) ran on a worker with pull %v", t.ID, m.pullIndex[idx], pull)
	}
	for _, o := range m.active[t.ID] {
		if at, ok := m.touchedAt[t.ID]; ok && !at.Before(o.start) {
			continue // cancelled by the test since o started: o's lease is gone
		}
		valid := false
		if o.pull {
			// A report ends the lease when it commits, which may be well
			// before its call answers (under load): the retry it decides
			// can be due and leased meanwhile.
			valid = r.start.Before(o.expires) && !o.reporting
		} else {
			// A live node's heartbeats keep its leases unless the test
			// cut its connections: then the lease may expire before the
			// node's watchdog (a timer in a starved process) stops o.
			valid = o.ctx.Err() == nil && !m.cutNear(o)
		}
		if valid {
			m.violate("task %s: attempt %d (lease %s) started on %s at %s while attempt %d (lease %s, pull %v, expiry %s) on %s still held its lease",
				t.ID, t.Attempt, t.LeaseID, node, r.start.Format(time.StampMicro), o.attempt, o.leaseID, o.pull,
				o.expires.Format(time.StampMicro), o.node)
		}
	}
	m.active[t.ID] = append(m.active[t.ID], r)
	m.runs[t.ID] = append(m.runs[t.ID], r)
	return r
}

// reports records that a pull run is about to send its report.
func (m *mnModel) reports(r *mnRun) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.reporting = true
}

// end records the end of a run.
func (m *mnModel) end(r *mnRun, reported error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.end = time.Now()
	r.reported = reported
	if r.ctx != nil {
		r.ctxDone = r.ctx.Err() != nil
	}
	as := m.active[r.task]
	for i := range as {
		if as[i] == r {
			m.active[r.task] = append(as[:i:i], as[i+1:]...)
			break
		}
	}
}

// markClosing notes that node began to close: its runs may be stopped.
func (m *mnModel) markClosing(node string) { m.mark(node, func(r *mnRun) { r.closing = true }) }

// markCut notes that node's connections were cut now.
func (m *mnModel) markCut(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cuts[node] = append(m.cuts[node], time.Now())
}

// cutNear reports whether r's node had its connections cut within a lease
// of r: its outcome may then miss its lease (a commit is retried only
// within the lease, and the pool reconnects meanwhile). m.mu is held.
func (m *mnModel) cutNear(r *mnRun) bool {
	for _, at := range m.cuts[r.node] {
		if !at.Before(r.start.Add(-mnLease)) && (r.end.IsZero() || at.Before(r.end.Add(mnLease))) {
			return true
		}
	}
	return false
}

func (m *mnModel) mark(node string, f func(*mnRun)) {
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

func (m *mnModel) activeRuns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, as := range m.active {
		n += len(as)
	}
	return n
}

// handlerError is the in-process handler's answer for an action.
func handlerError(ctx context.Context, action string) error {
	switch action {
	case mnOK:
		return nil
	case mnFail:
		return retry.Transient(errors.New("scripted failure"))
	case mnPerm:
		return retry.Permanent(retry.WithCode("poison", errors.New("scripted permanent failure")))
	case mnPanic:
		panic("scripted panic")
	case mnAfter:
		return retry.RetryAfter(errors.New("scripted 429"), mnRetryAfter)
	case mnSlow:
		time.Sleep(mnSlowFor) // ignores ctx on purpose: it outlives its lease if its node closes
		return nil
	}
	return fmt.Errorf("unexpected action %q", action)
}

// check compares every task with its script, the test's operations and the
// runs observed; reaps holds the lease expiry of each reaped attempt as the
// store held it when the reaper took it (watchReaps).
func (m *mnModel) check(t *testing.T, ctx context.Context, st store.Store, reaps map[reapKey]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Error(v)
	}
	ids := make([]string, 0, len(m.ids))
	for id := range m.ids {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 30 {
			t.Errorf(format, args...)
		}
	}
	var reaped, missed int
	for _, id := range ids {
		idx := m.ids[id]
		task, err := st.GetTask(ctx, id)
		if err != nil {
			t.Fatalf("get task %s: %v", id, err)
		}
		hist, err := st.ListAttempts(ctx, id)
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
		used := map[*mnRun]bool{}
		for k, a := range hist {
			act := mnAction(script, k+1)
			if a.Number != k+1 {
				fail("task %s: history row %d numbered %d", id, k, a.Number)
			}
			var run *mnRun
			for _, r := range runs {
				if r.attempt == a.Number && r.startedAt.UnixMicro() == a.StartedAt.UnixMicro() {
					run = r
				}
			}
			if run != nil {
				used[run] = true
			}
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
		// history; others (stopped at a close, lease lost) are not.
		for _, r := range runs {
			if used[r] || r.epoch != 0 {
				continue
			}
			if r.pull && r.action != mnAbandon && r.reported == nil {
				fail("task %s attempt %d: pull report on %s accepted, but no history row has it", id, r.attempt, r.node)
			}
			if !r.pull && !r.ctxDone && !r.closing && !m.cutNear(r) && !r.end.IsZero() {
				fail("task %s attempt %d: handler on %s returned (%s) with its context live, but its outcome is not recorded",
					id, r.attempt, r.node, r.action)
			}
		}
		last := hist[len(hist)-1]
		lastAct := mnAction(script, len(hist))
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
	if bad > 30 {
		t.Errorf("... and %d more", bad-30)
	}
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
// a database that slow). The reaper then retries the task: at least once,
// as designed. It reports whether the attempt is such a one; otherwise it
// calls fail. m.mu is held.
func (m *mnModel) outcomeMissedLease(run *mnRun, id string, a store.Attempt, reaps map[reapKey]time.Time, fail func(string, ...any)) bool {
	exp, ok := reaps[reapKey{task: id, attempt: a.Number, started: a.StartedAt.UnixMicro()}]
	lost := m.outcomeLost[outcomeKey{node: run.node, task: id, attempt: a.Number}]
	switch {
	case !ok:
		fail("task %s attempt %d: handler on %s returned (%s) with its context live, yet the attempt was reaped, and no lease expiry was noted for the reap",
			id, a.Number, run.node, run.action)
	case !run.end.Before(exp):
		fail("task %s attempt %d: handler on %s returned (%s) at %s with its context live, after its lease expired at %s (reaped at %s)",
			id, a.Number, run.node, run.action, run.end.Format(time.StampMicro), exp.Local().Format(time.StampMicro),
			a.FinishedAt.Local().Format(time.StampMicro))
	case lost == "":
		fail("task %s attempt %d: handler on %s returned (%s) with its context live at %s, before its lease expired at %s, yet the attempt was reaped and the node did not log its outcome as not recorded",
			id, a.Number, run.node, run.action, run.end.Format(time.StampMicro), exp.Local().Format(time.StampMicro))
	default:
		return true
	}
	return false
}

func histString(hist []store.Attempt) string {
	s := ""
	for _, a := range hist {
		s += fmt.Sprintf("[#%d %s %s %s-%s d=%s]", a.Number, a.Outcome, a.WorkerID, a.StartedAt.Format(time.StampMicro),
			a.FinishedAt.Format(time.StampMicro), a.Delay)
	}
	return s
}
