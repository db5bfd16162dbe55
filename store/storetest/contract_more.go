package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/retryq/retryq/store"
)

// contractMoreTests pin further promises of store.Store's doc comments and
// docs/storage.md: insert conflicts that carry idempotency keys, the
// history's default outcome kind, a cancel's traces, and the optional
// wake-up and cancellation channels.
var contractMoreTests = []testCase{
	{"Insert/ExistingIDWithKey", testInsertExistingIDWithKey},
	{"Outcome/EmptyKind", testOutcomeEmptyKind},
	{"Cancel/RunningLeavesNoHistory", testCancelRunningNoHistory},
	{"Notify/Channels", testNotifyChannels},
	{"Notify/TypedWakeups", testNotifyTypedWakeups},
	{"Params/CancelledContext", testCancelledContext},
	{"Params/HugeLimits", testHugeLimits},
}

// testInsertExistingIDWithKey: an id that already exists fails the whole
// batch with ErrConflict even when the task carries an idempotency key
// no task holds (a backend resolving keys with ON CONFLICT must not let
// the id's conflict pass as a duplicate); a task whose key is taken is
// that key's duplicate, whatever its id.
func testInsertExistingIDWithKey(e *env) {
	e.insert(base, nt("t_1", "a"))
	e.insert(base, keyed("t_2", "k2"))
	for _, batch := range [][]store.NewTask{
		{nt("t_new", "a"), keyed("t_1", "k-new")},
		{keyed("t_new", "k-other"), keyed("t_2", "k-new")},
	} {
		_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base.Add(time.Second), Tasks: batch})
		e.isErr(fmt.Sprintf("InsertTasks of the existing id %s under a new key", batch[1].ID), err, store.ErrConflict)
		e.notFound("t_new")
	}
	res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base.Add(time.Second), Tasks: []store.NewTask{keyed("t_1", "k2")}})
	e.noErr("InsertTasks of an existing id under another task's key", err)
	e.eq("duplicate", res[0].Duplicate, true)
	e.eq("the key's task", res[0].Task.ID, "t_2")
	e.eq("t_1's key", e.get("t_1", store.StatePending).IdempotencyKey, "")
	e.eq("pending", e.counts()[store.StatePending], 2)
}

// testOutcomeEmptyKind: an outcome without an OutcomeKind records its
// attempt as succeeded for a success and failed otherwise, and Stats
// counts the failures.
func testOutcomeEmptyKind(e *env) {
	now := base.Add(time.Second)
	ok := succeed(e.start(base, nt("t_ok", "ok")))
	retry := failRetry(e.start(base, nt("t_retry", "retry")), now.Add(time.Hour), "E")
	dead := kill(e.start(base, nt("t_dead", "dead")), "E", store.DeadMaxAttempts)
	for _, o := range []store.Outcome{ok, retry, dead} {
		o.OutcomeKind = ""
		e.mustRecord(now, o)
	}
	for id, want := range map[string]string{"t_ok": store.OutcomeSucceeded, "t_retry": store.OutcomeFailed, "t_dead": store.OutcomeFailed} {
		as := e.attempts(id)
		e.eq("attempts of "+id, len(as), 1)
		e.eq("outcome of "+id, as[0].Outcome, want)
	}
	st, err := e.s.Stats(e.ctx, store.StatsParams{})
	e.noErr("Stats", err)
	failures := map[string]int{}
	for _, ts := range st {
		failures[ts.Type] = ts.Failures
	}
	e.eq("failures", failures, map[string]int{"ok": 0, "retry": 1, "dead": 1})
}

// testCancelRunningNoHistory: cancelling a running task records no
// attempt, and the worker's later outcome and heartbeat under its lease
// are ErrLeaseLost and change nothing.
func testCancelRunningNoHistory(e *env) {
	t := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: t.ID, Now: now})
	e.noErr("CancelTask", err)
	cancelled := e.get(t.ID, store.StateCancelled)
	e.eq("history after the cancel", len(e.attempts(t.ID)), 0)
	e.isErr("outcome under the cancelled lease", e.record(now, succeed(t)), store.ErrLeaseLost)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
		{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: now.Add(time.Hour)}}})
	e.noErr("ExtendLeases", err)
	e.isErr("heartbeat under the cancelled lease", errs[0], store.ErrLeaseLost)
	e.sameTask("task after the late calls", e.get(t.ID, ""), cancelled)
	e.eq("history after the late calls", len(e.attempts(t.ID)), 0)
}

// notifyWait bounds how long testNotifyChannels waits for a channel.
const notifyWait = 10 * time.Second

// testNotifyChannels: a store.Notifier's wake-up channel is closed when
// its context is done; a store.CancelNotifier's cancellation channel
// receives the task and lease of a running task cancelled while the
// wake-up listener runs (an id holding spaces included) and is closed when
// its context is done or the store closes (one asked for after Close comes
// closed). Delivery is best effort, but a fresh store whose listener
// runs (it sent a wake-up) delivers.
func testNotifyChannels(e *env) {
	n, ok := e.s.(store.Notifier)
	if !ok {
		e.t.Skip("the store does not implement store.Notifier")
	}
	ctx, cancel := context.WithCancel(e.ctx)
	w := n.Wakeups(ctx)
	cancel()
	closedWithin(e, "wake-ups after their context was cancelled", w)

	cn, ok := e.s.(store.CancelNotifier)
	if !ok {
		return
	}
	lctx, stopListener := context.WithCancel(e.ctx)
	defer stopListener()
	w = n.Wakeups(lctx)
	cctx, cancelCancels := context.WithCancel(e.ctx)
	defer cancelCancels()
	cancels := cn.Cancellations(cctx)
	gone := cn.Cancellations(e.ctx) // closed by the store's Close

	// A first wake-up shows the listener runs: a backend may send one when
	// it connects, and an insert notifies. A store set to poll only (for
	// a pooler in transaction mode) sends none: delivery is best effort,
	// so only the channels' closing is checked then.
	deadline := time.After(notifyWait)
	listening := true
wait:
	for i := 0; ; i++ {
		e.insert(base, nt(fmt.Sprintf("wake_%d", i), "wake"))
		select {
		case <-w:
			break wait
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			e.t.Logf("no wake-up in %v (a store that only polls?): delivery not checked", notifyWait)
			listening = false
			break wait
		}
	}
	if listening {
		t := e.start(base, nt("t 1 with spaces", "cancelled"))
		_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: t.ID, Now: base.Add(time.Second)})
		e.noErr("CancelTask", err)
		select {
		case ref := <-cancels:
			e.eq("cancellation", ref, store.LeaseRef{TaskID: t.ID, LeaseID: t.LeaseID})
		case <-time.After(notifyWait):
			e.t.Fatalf("the cancellation of the running task %q did not arrive in %v", t.ID, notifyWait)
		}
	}
	cancelCancels()
	closedWithin(e, "cancellations after their context was cancelled", cancels)

	e.noErr("Close", e.s.Close())
	closedWithin(e, "cancellations after the store closed", gone)
	closedWithin(e, "cancellations asked for after Close", cn.Cancellations(e.ctx))
}

// testNotifyTypedWakeups: a store.TypedNotifier's wake-up channel is
// closed when its context is done, and what its DueTypes records for an
// insert is any type or a set holding the inserted task's type: a wake-up
// naming other types only would leave the task to the poll interval.
func testNotifyTypedWakeups(e *env) {
	n, ok := e.s.(store.TypedNotifier)
	if !ok {
		e.t.Skip("the store does not implement store.TypedNotifier")
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	w, due := n.TypedWakeups(ctx)
	deadline := time.After(notifyWait)
	for i := 0; ; i++ {
		e.insert(base, nt(fmt.Sprintf("typed_%d", i), "typed.warm"))
		select {
		case <-w:
		case <-time.After(50 * time.Millisecond):
			continue
		case <-deadline:
			e.t.Logf("no wake-up in %v (a store that only polls?): types not checked", notifyWait)
			cancel()
			closedWithin(e, "typed wake-ups after their context was cancelled", w)
			return
		}
		break
	}
	// The listener runs: clear what its connection and the warm-up
	// recorded. Notifications of the warm-up inserts may still arrive:
	// wait for a record naming the new type, or any type.
	due.Take()
	e.insert(base, nt("typed_new", "typed.new"))
	for {
		select {
		case <-w:
		case <-time.After(notifyWait):
			e.t.Fatalf("no wake-up naming typed.new (or any type) in %v", notifyWait)
		}
		types, all := due.Take()
		if all || slices.Contains(types, "typed.new") {
			break
		}
		for _, typ := range types {
			if typ != "typed.warm" {
				e.t.Fatalf("a wake-up named %q, a type nobody inserted", typ)
			}
		}
	}
	cancel()
	closedWithin(e, "typed wake-ups after their context was cancelled", w)
}

// closedWithin waits notifyWait at most until ch is closed, reading what
// is left in it.
func closedWithin[T any](e *env, what string, ch <-chan T) {
	e.t.Helper()
	deadline := time.After(notifyWait)
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-deadline:
			e.t.Fatalf("%s: still open after %v", what, notifyWait)
		}
	}
}

// testCancelledContext: every method called with a context already
// cancelled returns an error matching context.Canceled (the context's
// error, wrapped; not ErrUnavailable, which would have the caller back off
// and retry) and changes nothing.
func testCancelledContext(e *env) {
	t := e.start(base, nt("t_1", "a"))
	e.makeState(base, nt("d_1", "d"), store.StateDead)
	before := e.get("t_1", "")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	now := base.Add(time.Second)
	errs := map[string]error{}
	_, errs["InsertTasks"] = e.s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{nt("t_2", "a")}})
	_, errs["InsertTasks with a key"] = e.s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{keyed("t_3", "k")}})
	_, errs["FetchTasks"] = e.s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: now})
	_, errs["RecordOutcomes"] = e.s.RecordOutcomes(ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{succeed(t)}})
	_, errs["ExtendLeases"] = e.s.ExtendLeases(ctx, store.ExtendParams{Now: now,
		Leases: []store.LeaseRef{{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: now.Add(time.Hour)}}})
	_, errs["ExpiredLeases"] = e.s.ExpiredLeases(ctx, store.ExpiredParams{Limit: 1, Now: now})
	_, errs["PromoteDue"] = e.s.PromoteDue(ctx, store.PromoteParams{Limit: 1, Now: now})
	_, errs["NextWakeup"] = e.s.NextWakeup(ctx, store.WakeupParams{})
	_, errs["GetTask"] = e.s.GetTask(ctx, "t_1")
	_, errs["ListAttempts"] = e.s.ListAttempts(ctx, "t_1")
	_, _, errs["ListTasks"] = e.s.ListTasks(ctx, store.ListParams{Limit: 1})
	_, errs["CancelTask"] = e.s.CancelTask(ctx, store.CancelParams{ID: "t_1", Now: now})
	_, errs["RetryTask"] = e.s.RetryTask(ctx, store.RetryParams{ID: "d_1", Now: now})
	_, _, errs["ListDead"] = e.s.ListDead(ctx, store.DeadFilter{Limit: 1})
	_, errs["DeadSummary"] = e.s.DeadSummary(ctx, store.SummaryParams{})
	_, errs["RedriveDead"] = e.s.RedriveDead(ctx, store.DeadFilter{Now: now})
	_, errs["PurgeDead"] = e.s.PurgeDead(ctx, store.DeadFilter{})
	_, errs["DeleteFinished"] = e.s.DeleteFinished(ctx, store.RetentionParams{DeadBefore: now.Add(time.Hour)})
	_, errs["Stats"] = e.s.Stats(ctx, store.StatsParams{})
	_, errs["PutType"] = e.s.PutType(ctx, store.TypeConfig{Type: "x"}, now)
	_, errs["GetType"] = e.s.GetType(ctx, "x")
	_, errs["ListTypes"] = e.s.ListTypes(ctx)
	_, errs["AcquireLeader"] = e.s.AcquireLeader(ctx, store.LeaderParams{Name: "lead", NodeID: "n1", TTL: time.Minute, Now: now})
	errs["ReleaseLeader"] = e.s.ReleaseLeader(ctx, store.LeaderParams{Name: "lead", NodeID: "n1"})
	_, errs["GetLeader"] = e.s.GetLeader(ctx, "lead")
	errs["HeartbeatNode"] = e.s.HeartbeatNode(ctx, store.Node{ID: "n1", Role: "worker"}, now)
	_, errs["ListNodes"] = e.s.ListNodes(ctx, time.Time{})
	_, errs["PruneNodes"] = e.s.PruneNodes(ctx, store.PruneNodesParams{SeenBefore: now})
	_, _, errs["SchemaVersion"] = e.s.SchemaVersion(ctx)
	errs["Ping"] = e.s.Ping(ctx)
	for name, err := range errs {
		if !errors.Is(err, context.Canceled) {
			e.t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	e.sameTask("running task after the calls", e.get("t_1", ""), before)
	e.get("d_1", store.StateDead)
	e.notFound("t_2")
	e.notFound("t_3")
	types, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	e.eq("types", len(types), 0)
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes", len(nodes), 0)
	_, err = e.s.GetLeader(e.ctx, "lead")
	e.isErr("GetLeader", err, store.ErrNotFound)
}

// testHugeLimits: a Limit (or MaxBytes) as large as an int holds means "as
// many as there are", like any limit past the matching rows: no backend
// overflows it (a page reads Limit+1 candidates), refuses it or sizes
// anything by it.
func testHugeLimits(e *env) {
	for i := range 3 {
		e.insert(base, nt(fmt.Sprintf("p_%d", i), "p"))
		e.makeState(base, nt(fmt.Sprintf("d_%d", i), "d"), store.StateDead)
		e.makeState(base, nt(fmt.Sprintf("s_%d", i), "s"), store.StateScheduled)
	}
	e.start(base, nt("r_1", "r"))
	e.makeState(base, nt("ok_1", "ok"), store.StateSucceeded)
	later := base.Add(2 * time.Hour)
	for _, limit := range []int{math.MaxInt, math.MaxInt32 + 1} {
		what := func(m string) string { return fmt.Sprintf("%s(Limit %d)", m, limit) }
		page, next, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: limit, MaxBytes: math.MaxInt})
		e.noErr(what("ListTasks"), err)
		e.eq(what("ListTasks"), [2]any{len(page), next}, [2]any{11, ""})
		page, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: limit, States: []store.State{store.StatePending}})
		e.noErr(what("ListTasks of pending tasks"), err)
		e.eq(what("ListTasks of pending tasks"), len(page), 3)
		page, next, err = e.s.ListDead(e.ctx, store.DeadFilter{Limit: limit, MaxBytes: math.MaxInt})
		e.noErr(what("ListDead"), err)
		e.eq(what("ListDead"), [2]any{len(page), next}, [2]any{3, ""})
		exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: limit, Now: later})
		e.noErr(what("ExpiredLeases"), err)
		e.eqIDs(what("ExpiredLeases"), exp, "r_1")
		sum, err := e.s.DeadSummary(e.ctx, store.SummaryParams{Limit: limit})
		e.noErr(what("DeadSummary"), err)
		e.eq(what("DeadSummary"), [2]int{len(sum.Groups), sum.TaskCount}, [2]int{1, 3})
	}
	limit := math.MaxInt
	got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: limit, WorkerID: worker, LeaseDuration: leaseDur, Now: base, MaxBytes: math.MaxInt})
	e.noErr("FetchTasks(Limit MaxInt)", err)
	e.eqIDs("fetched", got, "p_0", "p_1", "p_2")
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: limit, Now: later})
	e.noErr("PromoteDue(Limit MaxInt)", err)
	e.eq("promoted", n, 3)
	n, err = e.s.RedriveDead(e.ctx, store.DeadFilter{Limit: limit, Now: later})
	e.noErr("RedriveDead(Limit MaxInt)", err)
	e.eq("redriven", n, 3)
	r, err := e.s.DeleteFinished(e.ctx, store.RetentionParams{Limit: limit, SucceededBefore: later})
	e.noErr("DeleteFinished(Limit MaxInt)", err)
	e.eq("deleted", r, store.RetentionResult{Succeeded: 1})
	e.makeState(later, nt("d_9", "d9"), store.StateDead)
	n, err = e.s.PurgeDead(e.ctx, store.DeadFilter{Limit: limit})
	e.noErr("PurgeDead(Limit MaxInt)", err)
	e.eq("purged", n, 1)
}
