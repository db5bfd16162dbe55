package multinode

// The model of TestEnginesUnderUserOperations: each task's script, the
// test's operations and their answers, every handler run (in process,
// pull, push) as the handler saw it, and the checks of the database's
// audit of every task transition against them. Where an outcome is racy
// by nature (an operation whose answer was lost, a policy change that
// nodes see within their type cache's lag) the model accepts exactly the
// set of outcomes the docs allow, and checks that the history is
// consistent whichever was taken.

import (
	"context"
	"fmt"
	"time"

	"github.com/retryq/retryq/store/postgres"
)

// The scripted actions of the operations test, one per attempt (the last
// repeats; a task retried by the test starts its script again).
const (
	opsOK    = actOK    // succeed (push: 200)
	opsFail  = actFail  // fail transiently (push: 500)
	opsPerm  = actPerm  // fail permanently (push: 400)
	opsAfter = actAfter // fail with Retry-After opsRetryAfter (push: 429 with Retry-After)
	opsHold  = "hold"   // run opsHoldFor (while the context lives), then succeed
)

const (
	opsTypeLocal   = "ops.local"
	opsTypePull    = "ops.pull"
	opsTypePush    = "ops.push"
	opsRetryAfter  = time.Second
	opsHoldFor     = 300 * time.Millisecond
	opsLease       = time.Second
	opsPullLease   = time.Second
	opsDelay       = 40 * time.Millisecond
	opsMaxDelay    = time.Second // = opsRetryAfter, so the delay recorded is exactly the Retry-After
	opsInitialMax  = 4           // the types' max attempts until the test changes them
	opsPolicyLag   = 15 * time.Second
	opsRunOverlap  = 250 * time.Millisecond // a push run matches an attempt started this close to it
	opsMaxViolated = 40
)

var opsScripts = [][]string{
	{opsOK}, {opsOK}, {opsHold}, {opsFail, opsOK}, {opsFail, opsFail, opsOK}, {opsFail},
	{opsPerm}, {opsAfter, opsOK}, {opsFail, opsAfter, opsHold}, {opsHold, opsFail, opsOK}, {opsHold, opsHold, opsPerm},
}

// opsSucceeds reports whether an action's attempt succeeds.
func opsSucceeds(action string) bool { return action == opsOK || action == opsHold }

// opsPolicy is one change of a type's max attempts by the test: in force
// from some instant in [from, to] when sure (the call succeeded), maybe
// when not (its answer was lost).
type opsPolicy struct {
	typ      string
	max      int
	from, to time.Time
	sure     bool
}

// opsModel is the test's record of the scripts, its operations and the runs.
type opsModel struct {
	modelBook // the tasks' ids, the runs, the violations; its mu guards the rest too
	scripts   map[int][]string
	typeOf    map[string]string
	opsOn     map[string][]time.Time // by task: when a cancel or retry of it began or ended
	cancels   map[string][2]int      // by task: cancels that succeeded, and whose answer was lost
	retries   map[string][2]int      // by task: manual retries that succeeded, and whose answer was lost
	redrives  [2]int                 // tasks redriven by answers, and the limits of redrives whose answer was lost
	purges    [2]int                 // the same for purges
	policies  []opsPolicy
	cuts      []time.Time // when the test ended every session of the database
	closing   []opsClose  // when each node began to close
}

func newOpsModel() *opsModel {
	m := &opsModel{scripts: map[int][]string{}, typeOf: map[string]string{}, opsOn: map[string][]time.Time{},
		cancels: map[string][2]int{}, retries: map[string][2]int{}}
	m.initBook(opsMaxViolated)
	return m
}

// actionOf returns what attempt of task index idx does.
func (m *opsModel) actionOf(idx, attempt int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.scripts[idx]
	if !ok {
		return ""
	}
	return scriptAction(s, attempt)
}

// touchedSince reports whether the test cancelled or retried the task at
// or after at: a run that started before may then have lost its lease.
// m.mu is held.
func (m *opsModel) touchedSince(task string, at time.Time) bool {
	for _, t := range m.opsOn[task] {
		if !t.Before(at) {
			return true
		}
	}
	return false
}

// cutNear reports whether the test ended every session within a lease of
// r (before its start to after its end): its node's heartbeats or its
// outcome may then have failed, and its lease expired. m.mu is held.
func (m *opsModel) cutNear(r *modelRun) bool {
	for _, at := range m.cuts {
		if !at.Before(r.start.Add(-2*opsLease)) && (r.end.IsZero() || at.Before(r.end.Add(2*opsLease))) {
			return true
		}
	}
	return false
}

// opsClose is a node's close by the test.
type opsClose struct {
	node string
	at   time.Time
}

// closingNear reports whether r's node (for a push run, which cannot tell
// its node, any node) began to close within a lease of r. m.mu is held.
func (m *opsModel) closingNear(r *modelRun) bool {
	for _, c := range m.closing {
		if (r.node == "" || c.node == r.node) && !c.at.Before(r.start.Add(-opsLease)) &&
			(r.end.IsZero() || c.at.Before(r.end.Add(opsLease))) {
			return true
		}
	}
	return false
}

// begin records the start of a run and checks that no other run of the
// task still holds a valid lease (modelRun.holdsLease), unless the test
// touched the task since that run started, cut the sessions near it, or
// its node closed.
func (m *opsModel) begin(r *modelRun) *modelRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.startRun(r, func(o *modelRun) bool { return m.touchedSince(r.task, o.start) || m.cutNear(o) || m.closingNear(o) })
	return r
}

// maxAttemptsAt returns the least and the greatest max attempts of typ
// that a node may have decided under at t: every value set at or before t
// whose successor was set less than opsPolicyLag before t (a node's type
// cache serves a configuration that old), the initial one included.
// m.mu is held.
func (m *opsModel) maxAttemptsAt(typ string, t time.Time) (lo, hi int) {
	lo, hi = opsInitialMax, opsInitialMax
	var ps []opsPolicy
	for _, p := range m.policies {
		if p.typ == typ {
			ps = append(ps, p)
		}
	}
	// The initial value holds until the first sure change plus the lag.
	initialLive := true
	for _, p := range ps {
		if p.sure && p.to.Add(opsPolicyLag).Before(t) {
			initialLive = false
		}
	}
	first := true
	add := func(v int) {
		if first {
			lo, hi, first = v, v, false
			return
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if initialLive {
		add(opsInitialMax)
	}
	for i, p := range ps {
		if p.from.After(t) {
			continue
		}
		// Superseded for good once a later sure change is older than the lag.
		live := true
		for _, q := range ps[i+1:] {
			if q.sure && q.to.Add(opsPolicyLag).Before(t) {
				live = false
			}
		}
		if live {
			add(p.max)
		}
	}
	return lo, hi
}

// The audit of every task transition: a trigger writes a row for each
// insert, each update that changes a task's state, attempt or lease, and
// each delete, in commit order per task (seq).
const opsAuditSQL = `
CREATE TABLE ops_audit (seq bigserial PRIMARY KEY, task_id text, op text, at timestamptz,
	old_state text, new_state text, old_attempt integer, new_attempt integer,
	old_lease text, new_lease text, new_started_at timestamptz, new_reason text, new_delay_ns bigint);
CREATE FUNCTION ops_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO ops_audit (task_id, op, at, new_state, new_attempt, new_lease, new_started_at, new_reason, new_delay_ns)
		VALUES (NEW.id, TG_OP, clock_timestamp(), NEW.state, NEW.attempt, NEW.lease_id, NEW.started_at, NEW.dead_reason, NEW.last_delay_ns);
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO ops_audit (task_id, op, at, old_state, old_attempt, old_lease)
		VALUES (OLD.id, TG_OP, clock_timestamp(), OLD.state, OLD.attempt, OLD.lease_id);
	ELSIF OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt
		OR OLD.lease_id IS DISTINCT FROM NEW.lease_id THEN
		INSERT INTO ops_audit (task_id, op, at, old_state, new_state, old_attempt, new_attempt, old_lease, new_lease,
			new_started_at, new_reason, new_delay_ns)
		VALUES (NEW.id, TG_OP, clock_timestamp(), OLD.state, NEW.state, OLD.attempt, NEW.attempt, OLD.lease_id, NEW.lease_id,
			NEW.started_at, NEW.dead_reason, NEW.last_delay_ns);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER ops_audit AFTER INSERT OR UPDATE OR DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION ops_audit()`

// installAudit creates the audit (opsAuditSQL) in the test's database.
func installAudit(ctx context.Context, st *postgres.Store) error {
	if _, err := st.Pool().Exec(ctx, opsAuditSQL); err != nil {
		return fmt.Errorf("create audit: %w", err)
	}
	return nil
}

// opsEvent is one audit row.
type opsEvent struct {
	seq                int64
	op                 string
	at                 time.Time
	oldState, newState string
	oldAttempt, newAtt int
	oldLease, newLease string
	newStarted         time.Time
	newReason          string
	newDelay           time.Duration
}

// readAudit reads the audit, by task in commit order.
func readAudit(ctx context.Context, st *postgres.Store) (map[string][]opsEvent, error) {
	rows, err := st.Pool().Query(ctx, `SELECT seq, task_id, op, at, coalesce(old_state, ''), coalesce(new_state, ''),
		coalesce(old_attempt, 0), coalesce(new_attempt, 0), coalesce(old_lease, ''), coalesce(new_lease, ''),
		coalesce(new_started_at, 'epoch'), coalesce(new_reason, ''), coalesce(new_delay_ns, 0) FROM ops_audit ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	out := map[string][]opsEvent{}
	for rows.Next() {
		var e opsEvent
		var id string
		var delay int64
		if err := rows.Scan(&e.seq, &id, &e.op, &e.at, &e.oldState, &e.newState, &e.oldAttempt, &e.newAtt, &e.oldLease,
			&e.newLease, &e.newStarted, &e.newReason, &delay); err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		e.newDelay = time.Duration(delay)
		out[id] = append(out[id], e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	return out, nil
}

// opsAttempt is one attempt of a task as the audit shows it: begun by a
// lease, ended by a transition out of running.
type opsAttempt struct {
	number  int
	started time.Time
	lease   string
	begun   time.Time // the audit's time of the lease
	end     *opsEvent // the transition that ended it (nil: not ended)
	counted bool      // false: released, its attempt not counted
}

// opsTotals sums what the audits of all tasks show.
type opsTotals struct {
	deadRetried, cancelledRetried, deleted int
	cancelledFrom                          map[string]int
	attempts, reaped, released             int
}
