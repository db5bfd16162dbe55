package storetest

import (
	"fmt"
	"math"
	"time"

	"github.com/retryq/retryq/store"
)

// contractTests pin promises of store.Store's doc comments and
// docs/storage.md that the other cases leave unchecked.
var contractTests = []testCase{
	{"Fetch/OnlyPendingTasks", testFetchOnlyPending},
	{"Fetch/PriorityExtremes", testFetchPriorityExtremes},
	{"Lease/ExpiredTieByID", testExpiredTieByID},
	{"Lease/NotRunningHoldsNoLease", testNotRunningHoldsNoLease},
	{"Lease/ForeignLeaseRefused", testForeignLeaseRefused},
	{"Outcome/UnknownStateIsInvalid", testOutcomeUnknownState},
	{"Outcome/DeadKeepsFirstFailure", testOutcomeDeadKeepsFirstFailure},
	{"Retry/ResetsEverything", testRetryResetsEverything},
	{"Promote/NextWakeupIgnoresOtherStates", testNextWakeupOtherStates},
	{"Read/CursorOfAVanishedTask", testCursorOfVanishedTask},
	{"Params/NonPositiveLimits", testNonPositiveLimits},
	{"Params/EmptyBatches", testEmptyBatches},
	{"Params/EmptyNames", testEmptyNames},
}

// testFetchOnlyPending: a fetch leases pending tasks only, however late its
// Now: not a scheduled or retry_waiting task whose run time has passed
// (PromoteDue moves those), not a task another worker holds, even under an
// expired lease (the reaper decides those), and no finished task.
func testFetchOnlyPending(e *env) {
	for _, st := range []store.State{store.StateScheduled, store.StateRetryWaiting, store.StateRunning,
		store.StateSucceeded, store.StateDead, store.StateCancelled} {
		e.makeState(base, nt("t_"+string(st), "a"), st)
	}
	e.insert(base, nt("t_pending", "a"))
	before, _, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: 100})
	e.noErr("ListTasks", err)
	later := base.Add(24 * time.Hour) // every run time and lease expiry has passed
	var all []store.Task
	for _, types := range [][]string{nil, {"a"}, {"a", "b"}} {
		got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: types, Limit: 100, WorkerID: "worker-2", LeaseDuration: leaseDur, Now: later})
		e.noErr(fmt.Sprintf("FetchTasks of types %v", types), err)
		all = append(all, got...)
	}
	e.eqIDs("tasks fetched", all, "t_pending")
	e.eq("pending task fetched", e.get("t_pending", store.StateRunning).WorkerID, "worker-2")
	for _, t := range before {
		if t.ID != "t_pending" {
			e.sameTask("task a fetch passed over", e.get(t.ID, ""), t)
		}
	}
}

// testFetchPriorityExtremes: the dispatch order holds over the whole 32-bit
// priority range, negative priorities included, and an effective priority
// sunk below the task's own orders it among the others.
func testFetchPriorityExtremes(e *env) {
	mk := func(id string, prio int) store.NewTask {
		n := nt(id, "a")
		n.Priority = prio
		return n
	}
	e.insert(base, mk("t_min", math.MinInt32), mk("t_neg", -1), mk("t_max", math.MaxInt32), mk("t_zero", 0), mk("t_pos", 1))
	s := nt("t_sunk", "s")
	s.Priority = math.MaxInt32
	o := failRetry(e.start(base, s), base, "E") // due at once: pending
	o.EffectivePrio = -5
	e.mustRecord(base, o)
	e.eq("sunk priority", e.get("t_sunk", store.StatePending).EffectivePrio, -5)
	e.eqIDs("fetch", e.fetch(base, 10), "t_max", "t_pos", "t_zero", "t_neg", "t_sunk", "t_min")
}

// testExpiredTieByID: ExpiredLeases lists expired leases earliest expiry
// first and, for one expiry, by id.
func testExpiredTieByID(e *env) {
	e.start(base, nt("t_b", "a"))
	e.start(base, nt("t_a", "a"))
	e.start(base.Add(-time.Second), nt("t_c", "a"))
	got, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: base.Add(time.Hour)})
	e.noErr("ExpiredLeases", err)
	e.eqIDs("expired leases", got, "t_c", "t_a", "t_b")
	got, err = e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 2, Now: base.Add(time.Hour)})
	e.noErr("ExpiredLeases", err)
	e.eqIDs("expired leases, limit 2", got, "t_c", "t_a")
}

// testNotRunningHoldsNoLease: whatever took a task out of running (an
// outcome, a release, a cancel), it holds no lease (empty LeaseID, zero
// LeaseExpiresAt), its old lease can no longer be extended, and WorkerID
// and StartedAt still describe its last attempt.
func testNotRunningHoldsNoLease(e *env) {
	started := base.Add(time.Second)
	now := base.Add(2 * time.Second)
	cases := []struct {
		id   string
		want store.State
		end  func(t store.Task)
	}{
		{"t_ok", store.StateSucceeded, func(t store.Task) { e.mustRecord(now, succeed(t)) }},
		{"t_retry", store.StateRetryWaiting, func(t store.Task) { e.mustRecord(now, failRetry(t, now.Add(time.Hour), "E")) }},
		{"t_retry_now", store.StatePending, func(t store.Task) { e.mustRecord(now, failRetry(t, now, "E")) }},
		{"t_dead", store.StateDead, func(t store.Task) { e.mustRecord(now, kill(t, "E", store.DeadNonRetryable)) }},
		{"t_release", store.StatePending, func(t store.Task) {
			e.mustRecord(now, store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending})
		}},
		{"t_delayed", store.StateRetryWaiting, func(t store.Task) {
			e.mustRecord(now, store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending, RunAt: now.Add(time.Hour)})
		}},
		{"t_cancel", store.StateCancelled, func(t store.Task) {
			_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: t.ID, Now: now})
			e.noErr("CancelTask", err)
		}},
	}
	for _, c := range cases {
		t := e.start(started, nt(c.id, c.id))
		c.end(t)
		got := e.get(c.id, c.want)
		e.eq(c.id+": LeaseID", got.LeaseID, "")
		e.eqTime(c.id+": LeaseExpiresAt", got.LeaseExpiresAt, time.Time{})
		e.eq(c.id+": WorkerID of the last attempt", got.WorkerID, worker)
		e.eqTime(c.id+": StartedAt of the last attempt", got.StartedAt, started)
		errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
			{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: now.Add(time.Hour)}}})
		e.noErr("ExtendLeases", err)
		e.isErr(c.id+": heartbeat under the old lease", errs[0], store.ErrLeaseLost)
		e.sameTask(c.id+": task after the refused heartbeat", e.get(c.id, ""), got)
	}
}

// testForeignLeaseRefused: a lease is good for its own task only. An
// outcome or heartbeat naming one task with another's lease id (a worker
// mixing up its tasks) is ErrLeaseLost and touches neither task; a
// heartbeat with a zero expiry is ErrInvalid for that entry alone.
func testForeignLeaseRefused(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	beforeA, beforeB := e.get("t_a", ""), e.get("t_b", "")
	now := base.Add(time.Second)
	mixed := succeed(a)
	mixed.TaskID = b.ID
	e.isErr("outcome for t_b under t_a's lease", e.record(now, mixed), store.ErrLeaseLost)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
		{TaskID: a.ID, LeaseID: b.LeaseID, ExpiresAt: base.Add(time.Hour)},
		{TaskID: b.ID, LeaseID: b.LeaseID},
		{TaskID: b.ID, LeaseID: a.LeaseID, ExpiresAt: base.Add(time.Hour)},
	}})
	e.noErr("ExtendLeases", err)
	e.eq("errors", len(errs), 3)
	e.isErr("heartbeat of t_a under t_b's lease", errs[0], store.ErrLeaseLost)
	e.isErr("heartbeat with a zero expiry", errs[1], store.ErrInvalid)
	e.isErr("heartbeat of t_b under t_a's lease", errs[2], store.ErrLeaseLost)
	e.sameTask("t_a after the mixed-up calls", e.get("t_a", ""), beforeA)
	e.sameTask("t_b after the mixed-up calls", e.get("t_b", ""), beforeB)
	e.eq("history of t_b", len(e.attempts("t_b")), 0)
	e.mustRecord(now, succeed(a))
	e.mustRecord(now, succeed(b))
}

// testOutcomeUnknownState: an outcome whose State is not succeeded,
// retry_waiting, dead or pending is ErrInvalid for that entry alone: the
// task keeps its lease, and the other outcomes of the batch apply.
func testOutcomeUnknownState(e *env) {
	ok := e.start(base, nt("t_ok", "a"))
	odd := e.start(base, nt("t_odd", "a"))
	before := e.get("t_odd", "")
	var outs []store.Outcome
	for _, st := range []store.State{store.StateRunning, store.StateScheduled, store.StateCancelled, "", "bogus"} {
		o := succeed(odd)
		o.State = st
		outs = append(outs, o)
	}
	outs = append(outs, succeed(ok))
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: base.Add(time.Second), Outcomes: outs})
	e.noErr("RecordOutcomes", err)
	e.eq("errors", len(errs), len(outs))
	for i, o := range outs[:len(outs)-1] {
		e.isErr(fmt.Sprintf("outcome %d with state %q", i, o.State), errs[i], store.ErrInvalid)
	}
	e.noErr("outcome of t_ok", errs[len(outs)-1])
	e.sameTask("task after the refused outcomes", e.get("t_odd", ""), before)
	e.eq("history of t_odd", len(e.attempts("t_odd")), 0)
	e.get("t_ok", store.StateSucceeded)
	e.mustRecord(base.Add(2*time.Second), succeed(odd))
}

// testOutcomeDeadKeepsFirstFailure: a task that dies after failing before
// keeps the time of its first failure.
func testOutcomeDeadKeepsFirstFailure(e *env) {
	t1 := base.Add(time.Second)
	e.mustRecord(t1, failRetry(e.start(base, nt("t_1", "a")), t1, "E1"))
	t2 := base.Add(time.Minute)
	e.mustRecord(t2, kill(e.lease(t2, "t_1", "a"), "E2", store.DeadMaxAttempts))
	got := e.get("t_1", store.StateDead)
	e.eqTime("FirstFailureAt", got.FirstFailureAt, t1)
	e.eqTime("UpdatedAt", got.UpdatedAt, t2)
	e.eq("Attempt", got.Attempt, 2)
}

// testRetryResetsEverything: RetryTask and RedriveDead put a task back to
// pending with RunAt = UpdatedAt = Now and every trace of its failures
// (attempts, error, delay, first failure, dead reason, sunk priority, last
// worker and start) reset, and nothing else changed; a task cancelled
// while scheduled for later is due at once.
func testRetryResetsEverything(e *env) {
	mkDead := func(id string) store.Task {
		n := nt(id, id)
		n.Priority, n.MaxAttempts, n.IdempotencyKey = 7, 3, "key-"+id
		t := e.start(base, n)
		o := failRetry(t, base.Add(time.Second), "E1")
		o.EffectivePrio = -3
		e.mustRecord(base.Add(time.Second), o)
		t = e.lease(base.Add(time.Second), id, id)
		k := kill(t, "E2", store.DeadMaxAttempts)
		k.LastDelay = 5 * time.Second
		e.mustRecord(base.Add(2*time.Second), k)
		got := e.get(id, store.StateDead)
		e.eq("LastDelay of the dead task", got.LastDelay, 5*time.Second)
		return got
	}
	reset := func(t store.Task, now time.Time) store.Task {
		t.State, t.Attempt, t.EffectivePrio = store.StatePending, 0, t.Priority
		t.RunAt, t.UpdatedAt, t.FirstFailureAt = now, now, time.Time{}
		t.LastError, t.LastDelay, t.DeadReason = nil, 0, ""
		t.LeaseID, t.LeaseExpiresAt, t.WorkerID, t.StartedAt = "", time.Time{}, "", time.Time{}
		return t
	}
	now := base.Add(time.Hour)
	dead := mkDead("t_retried")
	got, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: dead.ID, Now: now})
	e.noErr("RetryTask", err)
	e.sameTask("RetryTask's answer", got, reset(dead, now))
	e.sameTask("task after RetryTask", e.get(dead.ID, ""), reset(dead, now))

	dead = mkDead("t_redriven")
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: []string{dead.ID}, Now: now})
	e.noErr("RedriveDead", err)
	e.eq("redriven", n, 1)
	e.sameTask("task after RedriveDead", e.get(dead.ID, ""), reset(dead, now))

	sched := nt("t_sched", "sched")
	sched.RunAt = base.Add(48 * time.Hour)
	e.insert(base, sched)
	_, err = e.s.CancelTask(e.ctx, store.CancelParams{ID: sched.ID, Now: base.Add(time.Second)})
	e.noErr("CancelTask", err)
	before := e.get(sched.ID, store.StateCancelled)
	got, err = e.s.RetryTask(e.ctx, store.RetryParams{ID: sched.ID, Now: now})
	e.noErr("RetryTask of a task cancelled while scheduled", err)
	e.sameTask("RetryTask's answer", got, reset(before, now))
	e.eqIDs("fetch", e.fetch(now, 10, "sched"), "t_sched")
}

// testNextWakeupOtherStates: NextWakeup looks at scheduled and
// retry_waiting tasks and running leases only: a task cancelled while it
// waited or ran, or one that finished, wakes nobody.
func testNextWakeupOtherStates(e *env) {
	cancel := func(id string) {
		e.t.Helper()
		_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: id, Now: base.Add(time.Second)})
		e.noErr("CancelTask", err)
	}
	for _, st := range []store.State{store.StateScheduled, store.StateRetryWaiting, store.StateRunning} {
		id := "t_" + string(st)
		e.makeState(base, nt(id, string(st)), st)
		cancel(id)
	}
	e.makeState(base, nt("t_dead", "d"), store.StateDead)
	e.makeState(base, nt("t_ok", "o"), store.StateSucceeded)
	w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	e.eqTime("NextRunAt", w.NextRunAt, time.Time{})
	e.eqTime("NextLeaseExpiry", w.NextLeaseExpiry, time.Time{})
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: base.Add(48 * time.Hour)})
	e.noErr("PromoteDue", err)
	e.eq("promoted", n, 0)
}

// testCursorOfVanishedTask: a page's cursor stays good when the task it
// names leaves the listing (it changed state, or was purged): the next
// page continues right after it, skipping nothing and repeating nothing.
func testCursorOfVanishedTask(e *env) {
	for i := 1; i <= 9; i++ {
		e.insert(base, nt(fmt.Sprintf("t_%d", i), "a"))
	}
	pending := store.ListParams{States: []store.State{store.StatePending}, Limit: 3}
	page, next, err := e.s.ListTasks(e.ctx, pending)
	e.noErr("ListTasks", err)
	e.eqIDs("first page", page, "t_9", "t_8", "t_7")
	e.eq("cursor", next, "t_7")
	for _, id := range []string{"t_7", "t_6"} {
		_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: id, Now: base.Add(time.Second)})
		e.noErr("CancelTask", err)
	}
	pending.Cursor = next
	page, next, err = e.s.ListTasks(e.ctx, pending)
	e.noErr("ListTasks", err)
	e.eqIDs("page after the cursor's task was cancelled", page, "t_5", "t_4", "t_3")
	e.eq("cursor", next, "t_3")

	for i := 1; i <= 6; i++ {
		e.makeState(base.Add(time.Duration(i)*time.Second), nt(fmt.Sprintf("d_%d", i), fmt.Sprint("d", i)), store.StateDead)
	}
	dead, next, err := e.s.ListDead(e.ctx, store.DeadFilter{Limit: 2})
	e.noErr("ListDead", err)
	e.eqIDs("first dead page", dead, "d_6", "d_5")
	e.eq("dead cursor", next, "d_5")
	purged, err := e.s.PurgeDead(e.ctx, store.DeadFilter{IDs: []string{"d_5"}})
	e.noErr("PurgeDead", err)
	e.eq("purged", purged, 1)
	moved, err := e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: []string{"d_4"}, Now: base.Add(time.Minute)})
	e.noErr("RedriveDead", err)
	e.eq("redriven", moved, 1)
	rest := e.listDead(store.DeadFilter{Limit: 2, Cursor: next})
	e.eqIDs("dead pages after the cursor's task was purged", rest, "d_3", "d_2", "d_1")
}

// testNonPositiveLimits: every listing and fetch needs a positive Limit (and
// a fetch a positive LeaseDuration); zero or negative is ErrInvalid and
// changes nothing.
func testNonPositiveLimits(e *env) {
	e.makeState(base, nt("t_sched", "s"), store.StateScheduled)
	e.makeState(base, nt("t_run", "r"), store.StateRunning)
	e.makeState(base, nt("t_dead", "d"), store.StateDead)
	e.insert(base, nt("t_pend", "p"))
	later := base.Add(48 * time.Hour)
	for _, limit := range []int{0, -1, math.MinInt} {
		what := func(m string) string { return fmt.Sprintf("%s(Limit %d)", m, limit) }
		_, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: limit, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
		e.isErr(what("FetchTasks"), err, store.ErrInvalid)
		_, err = e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: limit, Now: later})
		e.isErr(what("ExpiredLeases"), err, store.ErrInvalid)
		_, err = e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: limit, Now: later})
		e.isErr(what("PromoteDue"), err, store.ErrInvalid)
		_, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: limit})
		e.isErr(what("ListTasks"), err, store.ErrInvalid)
		_, _, err = e.s.ListDead(e.ctx, store.DeadFilter{Limit: limit})
		e.isErr(what("ListDead"), err, store.ErrInvalid)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: d, Now: base})
		e.isErr(fmt.Sprintf("FetchTasks(LeaseDuration %v)", d), err, store.ErrInvalid)
	}
	e.eq("pending task's attempts", e.get("t_pend", store.StatePending).Attempt, 0)
	e.get("t_sched", store.StateScheduled)
	e.get("t_run", store.StateRunning)
}

// testEmptyBatches: a call with nothing to do succeeds and answers with
// nothing (an outcome batch or heartbeat without entries, an empty type
// list that means every type, bulk changes that match nothing), but a zero
// Now is refused even then.
func testEmptyBatches(e *env) {
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: base})
	e.noErr("RecordOutcomes without outcomes", err)
	e.eq("its errors", len(errs), 0)
	errs, err = e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: base, Leases: []store.LeaseRef{}})
	e.noErr("ExtendLeases without leases", err)
	e.eq("its errors", len(errs), 0)
	_, err = e.s.RecordOutcomes(e.ctx, store.OutcomeParams{})
	e.isErr("RecordOutcomes without outcomes and with a zero Now", err, store.ErrInvalid)
	_, err = e.s.ExtendLeases(e.ctx, store.ExtendParams{})
	e.isErr("ExtendLeases without leases and with a zero Now", err, store.ErrInvalid)

	got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: []string{}, Limit: 5, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
	e.noErr("FetchTasks of an empty store", err)
	e.eq("fetched", len(got), 0)
	e.insert(base, nt("t_a", "a"), nt("t_b", "b"))
	got, err = e.s.FetchTasks(e.ctx, store.FetchParams{Types: []string{}, Limit: 5, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
	e.noErr("FetchTasks with an empty type list", err)
	e.eqIDs("fetched with an empty type list", got, "t_a", "t_b")

	exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 5, Now: base})
	e.noErr("ExpiredLeases", err)
	e.eq("expired", len(exp), 0)
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Now: base})
	e.noErr("RedriveDead with no dead task", err)
	e.eq("redriven", n, 0)
	sum, err := e.s.DeadSummary(e.ctx, store.SummaryParams{})
	e.noErr("DeadSummary with no dead task", err)
	e.eq("groups", len(sum.Groups), 0)
	e.eq("group count", sum.GroupCount, 0)
	e.eq("task count", sum.TaskCount, 0)
	dead, next, err := e.s.ListDead(e.ctx, store.DeadFilter{Limit: 5})
	e.noErr("ListDead with no dead task", err)
	e.eq("dead", len(dead), 0)
	e.eq("cursor", next, "")
	pruned, err := e.s.PruneNodes(e.ctx, store.PruneNodesParams{SeenBefore: base})
	e.noErr("PruneNodes with no node", err)
	e.eq("pruned", pruned, 0)
	e.noErr("ReleaseLeader of a lease nobody holds", e.s.ReleaseLeader(e.ctx, store.LeaderParams{Name: "lead", NodeID: "n1"}))
	_, err = e.s.GetLeader(e.ctx, "lead")
	e.isErr("GetLeader of a lease nobody holds", err, store.ErrNotFound)
}

// testEmptyNames: a write that names nothing (a cancel or retry without a
// task id, a leadership lease without a name, a holder or a positive TTL,
// a heartbeat without a node id) can never succeed and is ErrInvalid,
// storing nothing; a lookup by the empty name finds nothing (ErrNotFound).
func testEmptyNames(e *env) {
	_, err := e.s.CancelTask(e.ctx, store.CancelParams{Now: base})
	e.isErr("CancelTask without an id", err, store.ErrInvalid)
	_, err = e.s.RetryTask(e.ctx, store.RetryParams{Now: base})
	e.isErr("RetryTask without an id", err, store.ErrInvalid)
	for _, p := range []store.LeaderParams{
		{NodeID: "n1", TTL: time.Minute, Now: base},
		{Name: "lead", TTL: time.Minute, Now: base},
		{Name: "lead", NodeID: "n1", Now: base},
		{Name: "lead", NodeID: "n1", TTL: -time.Minute, Now: base},
	} {
		_, err = e.s.AcquireLeader(e.ctx, p)
		e.isErr(fmt.Sprintf("AcquireLeader(name %q, node %q, TTL %v)", p.Name, p.NodeID, p.TTL), err, store.ErrInvalid)
	}
	_, err = e.s.GetLeader(e.ctx, "lead")
	e.isErr("GetLeader after the refused AcquireLeader calls", err, store.ErrNotFound)
	e.isErr("HeartbeatNode without an id", e.s.HeartbeatNode(e.ctx, store.Node{Role: "worker"}, base), store.ErrInvalid)
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes", len(nodes), 0)

	_, err = e.s.GetTask(e.ctx, "")
	e.isErr("GetTask(\"\")", err, store.ErrNotFound)
	_, err = e.s.ListAttempts(e.ctx, "")
	e.isErr("ListAttempts(\"\")", err, store.ErrNotFound)
	_, err = e.s.GetType(e.ctx, "")
	e.isErr("GetType(\"\")", err, store.ErrNotFound)
	_, err = e.s.GetLeader(e.ctx, "")
	e.isErr("GetLeader(\"\")", err, store.ErrNotFound)
}
