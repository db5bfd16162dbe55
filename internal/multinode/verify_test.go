package multinode

// Reading back what a multi-node run did (the nodes' run logs, the task
// rows and their histories) and checking it against what each task's
// failures dictate.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// run is one handler run read from a node's run log.
type run struct {
	node    string
	task    string
	attempt int
	start   time.Time
	end     time.Time // zero: no end line (the node was killed mid-run)
	result  string
}

// readRuns parses every node's run log.
func (c *cluster) readRuns() map[string][]*run {
	c.t.Helper()
	out := map[string][]*run{}
	for _, n := range c.sortedNodes() {
		f, err := os.Open(n.runLog)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			c.t.Fatal(err)
		}
		open := map[string]*run{} // "task attempt" -> run awaiting its end
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || (fs[0] == "E" && len(fs) != 5) {
				// A SIGKILL can only cut the very last line short.
				if n.killed.IsZero() {
					c.t.Errorf("%s:%d: malformed line %q", n.runLog, line, sc.Text())
				}
				continue
			}
			att, err1 := strconv.Atoi(fs[2])
			ns, err2 := strconv.ParseInt(fs[3], 10, 64)
			if err1 != nil || err2 != nil {
				if n.killed.IsZero() {
					c.t.Errorf("%s:%d: malformed line %q", n.runLog, line, sc.Text())
				}
				continue
			}
			key := fs[1] + " " + fs[2]
			switch fs[0] {
			case "S":
				if open[key] != nil {
					c.t.Errorf("node %s started task %s attempt %d twice", n.id, fs[1], att)
				}
				r := &run{node: n.id, task: fs[1], attempt: att, start: time.Unix(0, ns)}
				open[key] = r
				out[r.task] = append(out[r.task], r)
			case "E":
				r := open[key]
				if r == nil {
					c.t.Errorf("%s:%d: end without start: %q", n.runLog, line, sc.Text())
					continue
				}
				r.end, r.result = time.Unix(0, ns), fs[4]
				delete(open, key)
			}
		}
		if err := sc.Err(); err != nil {
			c.t.Fatal(err)
		}
		f.Close()
		for _, r := range open {
			if n.killed.IsZero() {
				c.t.Errorf("node %s started task %s attempt %d and never finished it, but was not killed", n.id, r.task, r.attempt)
			}
		}
	}
	return out
}

// taskRow is a task's final state and history, read from the database.
type taskRow struct {
	id         string
	p          payload
	state      store.State
	attempt    int
	deadReason string
	errClass   string
	hist       []histRow
}

type histRow struct {
	number   int
	worker   string
	outcome  string
	class    string
	finished time.Time // for a lease_expired attempt: when the reaper decided it
}

// readTasks loads every task and its history in two queries.
func (c *cluster) readTasks() map[string]*taskRow {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 60*time.Second)
	defer cancel()
	out := map[string]*taskRow{}
	rows, err := c.st.Pool().Query(ctx, "SELECT id, payload, state, attempt, dead_reason, coalesce(last_error_class, '') FROM tasks")
	if err != nil {
		c.t.Fatal(err)
	}
	for rows.Next() {
		var r taskRow
		var pl []byte
		var state string
		if err := rows.Scan(&r.id, &pl, &state, &r.attempt, &r.deadReason, &r.errClass); err != nil {
			c.t.Fatal(err)
		}
		if err := json.Unmarshal(pl, &r.p); err != nil {
			c.t.Fatalf("task %s: payload %q: %v", r.id, pl, err)
		}
		r.state = store.State(state)
		out[r.id] = &r
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	// The history: the attempts rows, then the successful attempt, which
	// the task row itself records (store/postgres ListAttempts).
	rows, err = c.st.Pool().Query(ctx, `
SELECT task_id, number, worker_id, outcome, coalesce(error_class, ''), finished_at, 0 AS last, seq FROM attempts
UNION ALL
SELECT id, attempt, worker_id, 'succeeded', '', updated_at, 1, 0 FROM tasks WHERE state = 'succeeded'
ORDER BY 1, 7, 8`)
	if err != nil {
		c.t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var h histRow
		var last, seq int64
		if err := rows.Scan(&id, &h.number, &h.worker, &h.outcome, &h.class, &h.finished, &last, &seq); err != nil {
			c.t.Fatal(err)
		}
		if r := out[id]; r != nil {
			r.hist = append(r.hist, h)
		} else {
			c.t.Errorf("history row of unknown task %s", id)
		}
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// report summarizes what verify found.
type report struct {
	reaped        int            // tasks with at least one lease_expired attempt
	reapedByNode  map[string]int // lease_expired attempts by the node that held the lease
	lostOutcomes  int            // runs that finished but whose outcome was not recorded (reaped instead)
	runsNoHistory int            // runs whose attempt has no history row: impossible, counted for the message
	unstarted     int            // reaped attempts that never reached a handler (fetched, then the node died or the fetch reply was lost)
	attempts      int
	byClass       map[string]int
}

// verify checks every task against its class and its runs against each
// other. allowReap decides whether a lease_expired attempt held by the given
// node is acceptable.
func (c *cluster) verify(n int, allowReap func(node string) bool) report {
	c.t.Helper()
	tasks := c.readTasks()
	runs := c.readRuns()
	rep := report{reapedByNode: map[string]int{}, byClass: map[string]int{}}
	if len(tasks) != n {
		c.t.Errorf("%d tasks in the database, want %d", len(tasks), n)
	}
	f := &failures{t: c.t}
	fail := f.fail
	seenIdx := map[int]bool{}
	for i := range n {
		id := c.ids[i]
		tr := tasks[id]
		if tr == nil {
			fail("task %d (%s) is missing", i, id)
			continue
		}
		if tr.p.I != i || seenIdx[i] {
			fail("task %s: payload index %d, want %d", id, tr.p.I, i)
		}
		seenIdx[i] = true
		rep.byClass[tr.p.K]++
		rep.attempts += tr.attempt
		c.checkHistory(tr, fail, allowReap, &rep)
		c.checkRuns(tr, runs[id], fail, allowReap, &rep)
	}
	f.flush()
	return rep
}

func nodeOf(worker string) string { return strings.TrimSuffix(worker, "/w") }

// checkHistory checks a task's final state and history against its class.
// Attempts that ended in lease_expired (a node died, or lost its lease) are
// allowed where allowReap says so; they use up an attempt number like any
// other failure.
func (c *cluster) checkHistory(tr *taskRow, fail func(string, ...any), allowReap func(string) bool, rep *report) {
	h := tr.hist
	if len(h) != tr.attempt || len(h) == 0 {
		fail("task %s (%s): attempt %d but %d history rows", tr.id, tr.p.K, tr.attempt, len(h))
		return
	}
	reaped := false
	for j, a := range h {
		if a.number != j+1 {
			fail("task %s: history row %d has attempt number %d", tr.id, j, a.number)
		}
		if a.outcome == store.OutcomeLeaseExpired {
			reaped = true
			rep.reapedByNode[nodeOf(a.worker)]++
			if !allowReap(nodeOf(a.worker)) {
				fail("task %s attempt %d: lease expired on %s, which was neither killed nor cut off", tr.id, a.number, a.worker)
			}
		}
	}
	if reaped {
		rep.reaped++
	}
	last := h[len(h)-1]
	// what attempt k must have recorded, if it was not reaped
	want := func(k int) string {
		switch tr.p.K {
		case classOK:
			return store.OutcomeSucceeded
		case classFlaky:
			if k <= tr.p.N {
				return store.OutcomeFailed
			}
			return store.OutcomeSucceeded
		default:
			return store.OutcomeFailed
		}
	}
	for j, a := range h[:len(h)-1] {
		if a.outcome != store.OutcomeLeaseExpired && (a.outcome != want(j+1) || a.outcome == store.OutcomeSucceeded) {
			fail("task %s (%s n=%d): attempt %d recorded %s, want %s or lease_expired", tr.id, tr.p.K, tr.p.N, j+1, a.outcome, want(j+1))
		}
		if a.outcome == store.OutcomeFailed && a.class != "transient" {
			fail("task %s: attempt %d failed with class %q before the last attempt", tr.id, j+1, a.class)
		}
	}
	switch tr.p.K {
	case classOK, classFlaky:
		if tr.state != store.StateSucceeded || last.outcome != store.OutcomeSucceeded {
			fail("task %s (%s n=%d): state %s, last attempt %d %s; want succeeded", tr.id, tr.p.K, tr.p.N, tr.state, last.number, last.outcome)
		}
		if tr.attempt > maxAttempts {
			fail("task %s: %d attempts, more than the policy's %d", tr.id, tr.attempt, maxAttempts)
		}
		if tr.p.K == classFlaky && last.number <= tr.p.N {
			fail("task %s (flaky n=%d): succeeded at attempt %d", tr.id, tr.p.N, last.number)
		}
	case classFail:
		if tr.state != store.StateDead || tr.deadReason != store.DeadMaxAttempts || tr.attempt != maxAttempts {
			fail("task %s (fail): state %s reason %q after %d attempts; want dead max_attempts after %d", tr.id, tr.state, tr.deadReason, tr.attempt, maxAttempts)
		}
		if last.outcome != store.OutcomeLeaseExpired && (last.outcome != store.OutcomeFailed || last.class != "transient") {
			fail("task %s (fail): last attempt %s class %q; want a transient failure", tr.id, last.outcome, last.class)
		}
	case classPerm:
		if tr.state != store.StateDead || tr.deadReason != store.DeadNonRetryable || last.outcome != store.OutcomeFailed || last.class != "permanent" {
			fail("task %s (perm): state %s reason %q, last attempt %d %s class %q; want dead non_retryable after a permanent failure",
				tr.id, tr.state, tr.deadReason, last.number, last.outcome, last.class)
		}
	default:
		fail("task %s: unknown class %q", tr.id, tr.p.K)
	}
}

// checkRuns checks a task's handler runs: runs of one task never overlap in
// time, attempt numbers grow, every recorded outcome comes from a run that
// ended that way, and every run is accounted for in the history.
func (c *cluster) checkRuns(tr *taskRow, rs []*run, fail func(string, ...any), allowReap func(string) bool, rep *report) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
	byAttempt := map[int]*run{}
	for i, r := range rs {
		if byAttempt[r.attempt] != nil {
			fail("task %s attempt %d ran twice (%s and %s)", tr.id, r.attempt, byAttempt[r.attempt].node, r.node)
		}
		byAttempt[r.attempt] = r
		end := r.end
		if end.IsZero() {
			end = c.nodes[r.node].killed // only killed nodes leave runs open (readRuns checks)
		}
		if i+1 < len(rs) {
			next := rs[i+1]
			if next.start.Before(end) {
				fail("task %s: attempt %d on %s started at %s while attempt %d on %s ran until %s",
					tr.id, next.attempt, next.node, next.start.Format(time.StampMicro), r.attempt, r.node, end.Format(time.StampMicro))
			}
			if next.attempt <= r.attempt {
				fail("task %s: attempt %d ran after attempt %d", tr.id, next.attempt, r.attempt)
			}
		}
		if r.attempt < 1 || r.attempt > len(tr.hist) {
			rep.runsNoHistory++
			fail("task %s: run of attempt %d on %s has no history row (%d rows)", tr.id, r.attempt, r.node, len(tr.hist))
			continue
		}
		if r.attempt >= 2 && r.attempt-2 < len(tr.hist) {
			// A run after a reaped attempt starts only once the reaper
			// took that lease back (it reaps only expired leases): no
			// handler ran while the previous holder's lease was valid,
			// even if that holder's handler had ended or its node died.
			if prev := tr.hist[r.attempt-2]; prev.outcome == store.OutcomeLeaseExpired && r.start.Before(prev.finished) {
				fail("task %s: attempt %d on %s started at %s, before attempt %d's lease was reaped at %s",
					tr.id, r.attempt, r.node, r.start.Format(time.StampMicro), prev.number, prev.finished.Format(time.StampMicro))
			}
		}
		h := tr.hist[r.attempt-1]
		if nodeOf(h.worker) != r.node {
			fail("task %s attempt %d ran on %s but the history names %s", tr.id, r.attempt, r.node, h.worker)
		}
		if h.outcome == store.OutcomeLeaseExpired {
			if r.end.IsZero() {
				continue // killed mid-run, then reaped: as it should be
			}
			// The handler finished but its outcome never committed (the
			// node died before its commit, or the database was down).
			rep.lostOutcomes++
			if !allowReap(r.node) {
				fail("task %s attempt %d finished on %s (%s) but was reaped", tr.id, r.attempt, r.node, r.result)
			}
			continue
		}
		if r.end.IsZero() {
			fail("task %s attempt %d on %s has no end but its outcome %s was recorded", tr.id, r.attempt, r.node, h.outcome)
			continue
		}
		wantRes := map[string]string{store.OutcomeSucceeded: resOK}[h.outcome]
		if h.outcome == store.OutcomeFailed {
			wantRes = map[string]string{"transient": resTransient, "permanent": resPermanent}[h.class]
		}
		if r.result != wantRes {
			fail("task %s attempt %d: run ended %s but the history records %s/%s", tr.id, r.attempt, r.result, h.outcome, h.class)
		}
	}
	// Every attempt that was not reaped ran exactly once.
	for _, h := range tr.hist {
		if h.outcome == store.OutcomeLeaseExpired {
			if byAttempt[h.number] == nil {
				rep.unstarted++
			}
			continue
		}
		if byAttempt[h.number] == nil {
			fail("task %s: attempt %d recorded %s on %s but no run of it was logged", tr.id, h.number, h.outcome, h.worker)
		}
	}
}
