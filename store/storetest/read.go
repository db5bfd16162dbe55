package storetest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

var promoteTests = []testCase{
	{"Promote/Due", testPromote},
	{"Promote/NextWakeup", testNextWakeup},
}

var readTests = []testCase{
	{"Read/NotFound", testNotFound},
	{"Read/ListTasks", testListTasks},
}

func testPromote(e *env) {
	sched := func(id string, d time.Duration) {
		n := nt(id, "s")
		n.RunAt = base.Add(d)
		e.insert(base, n)
	}
	sched("t_s1", 10*time.Second)
	sched("t_s2", 20*time.Second)
	sched("t_s3", 30*time.Second)
	r := e.start(base, nt("t_r1", "r"))
	e.mustRecord(base, failRetry(r, base.Add(15*time.Second), "E"))
	e.makeState(base, nt("t_run", "x"), store.StateRunning)
	e.makeState(base, nt("t_pend", "y"), store.StatePending)

	promote := func(now time.Time, limit int) int {
		e.t.Helper()
		n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: limit, Now: now})
		e.noErr("PromoteDue", err)
		return n
	}
	e.eq("promoted before anything is due", promote(base.Add(5*time.Second), 10), 0)
	now := base.Add(20 * time.Second)
	e.eq("promoted with limit 2", promote(now, 2), 2)
	e.eqTime("UpdatedAt of a promoted task", e.get("t_s1", store.StatePending).UpdatedAt, now)
	e.get("t_r1", store.StatePending)
	e.get("t_s2", store.StateScheduled) // due, but beyond the limit
	e.eq("promoted the rest", promote(now, 10), 1)
	e.get("t_s2", store.StatePending)
	e.get("t_s3", store.StateScheduled)
	e.get("t_run", store.StateRunning)
	e.eqTime("RunAt is kept", e.get("t_r1", "").RunAt, base.Add(15*time.Second))
	e.eq("promoted at exactly RunAt", promote(base.Add(30*time.Second), 10), 1)
	e.eq("nothing left", promote(base.Add(time.Hour), 10), 0)
	_, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 0, Now: base})
	e.isErr("PromoteDue(Limit 0)", err, store.ErrInvalid)
}

func testNextWakeup(e *env) {
	wake := func() store.Wakeup {
		e.t.Helper()
		w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
		e.noErr("NextWakeup", err)
		return w
	}
	w := wake()
	e.eqTime("NextRunAt of an empty store", w.NextRunAt, time.Time{})
	e.eqTime("NextLeaseExpiry of an empty store", w.NextLeaseExpiry, time.Time{})

	e.makeState(base, nt("t_pend", "p"), store.StatePending)
	e.makeState(base, nt("t_done", "d"), store.StateSucceeded)
	w = wake()
	e.eqTime("NextRunAt with only pending work", w.NextRunAt, time.Time{})
	e.eqTime("NextLeaseExpiry with no running task", w.NextLeaseExpiry, time.Time{})

	n := nt("t_s", "s")
	n.RunAt = base.Add(time.Minute)
	e.insert(base, n)
	r := e.start(base.Add(time.Second), nt("t_r", "r"))
	e.mustRecord(base.Add(2*time.Second), failRetry(r, base.Add(40*time.Second), "E"))
	e.start(base.Add(3*time.Second), nt("t_run", "x"))
	e.start(base.Add(4*time.Second), nt("t_run2", "x"))
	w = wake()
	e.eqTime("NextRunAt", w.NextRunAt, base.Add(40*time.Second))
	e.eqTime("NextLeaseExpiry", w.NextLeaseExpiry, base.Add(3*time.Second+leaseDur))
}

func testNotFound(e *env) {
	e.notFound("nope")
	_, err := e.s.ListAttempts(e.ctx, "nope")
	e.isErr("ListAttempts(unknown)", err, store.ErrNotFound)
	e.insert(base, nt("t_1", "a"))
	as, err := e.s.ListAttempts(e.ctx, "t_1")
	e.noErr("ListAttempts(task without history)", err)
	e.eq("attempts", len(as), 0)
	if as == nil {
		// Every backend answers alike: a caller that encodes the history
		// as JSON gets [], not null.
		e.t.Fatal("ListAttempts(task without history) returned nil, want an empty slice")
	}
}

func testListTasks(e *env) {
	const n = 250
	for i := range n {
		typ := "a"
		if i%2 == 1 {
			typ = "b"
		}
		e.insert(base, nt(fmt.Sprintf("t_%03d", i), typ))
	}
	e.fetch(base, 30, "b") // t_001, t_003, ... t_059 are running

	list := func(p store.ListParams) []store.Task {
		e.t.Helper()
		var all []store.Task
		seen := map[string]bool{}
		for pages := 0; ; pages++ {
			if pages > n {
				e.t.Fatal("ListTasks pagination does not end")
			}
			page, next, err := e.s.ListTasks(e.ctx, p)
			e.noErr("ListTasks", err)
			if len(page) > p.Limit {
				e.t.Fatalf("ListTasks returned %d tasks, limit %d", len(page), p.Limit)
			}
			for _, t := range page {
				if seen[t.ID] {
					e.t.Fatalf("ListTasks returned %s twice", t.ID)
				}
				seen[t.ID] = true
			}
			all = append(all, page...)
			if next == "" {
				return all
			}
			if len(page) == 0 {
				e.t.Fatal("ListTasks returned an empty page with a next cursor")
			}
			p.Cursor = next
		}
	}
	descending := func(what string, ts []store.Task) {
		e.t.Helper()
		for i := 1; i < len(ts); i++ {
			if ts[i-1].ID <= ts[i].ID {
				e.t.Fatalf("%s: %s listed before %s: want newest id first", what, ts[i-1].ID, ts[i].ID)
			}
		}
	}
	all := list(store.ListParams{Limit: 7})
	e.eq("all tasks", len(all), n)
	descending("all", all)
	e.eq("first task", all[0].ID, "t_249")
	e.sameTask("listed task", all[0], e.get("t_249", ""))

	as := list(store.ListParams{Type: "a", Limit: 10})
	e.eq("type a", len(as), n/2)
	descending("type a", as)
	for _, t := range as {
		e.eq("type of "+t.ID, t.Type, "a")
	}
	running := list(store.ListParams{States: []store.State{store.StateRunning}, Limit: 8})
	e.eq("running", len(running), 30)
	e.eq("newest running", running[0].ID, "t_059")
	both := list(store.ListParams{Type: "b", States: []store.State{store.StatePending, store.StateRunning}, Limit: 1000})
	e.eq("b pending or running", len(both), n/2)
	none := list(store.ListParams{Type: "a", States: []store.State{store.StateRunning}, Limit: 5})
	e.eq("a running", len(none), 0)

	exact, next, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: n})
	e.noErr("ListTasks", err)
	e.eq("one full page", len(exact), n)
	e.eq("cursor after the last page", next, "")

	_, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: 0})
	e.isErr("ListTasks(Limit 0)", err, store.ErrInvalid)
	_, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: 5, States: []store.State{"bogus"}})
	e.isErr("ListTasks(unknown state)", err, store.ErrInvalid)
}

var cancelRetryTests = []testCase{
	{"Cancel/AllowedStates", testCancelAllowed},
	{"Cancel/Conflict", testCancelConflict},
	{"Cancel/LongLeaseID", testCancelLongLease},
	{"Retry/DeadAndCancelled", testRetry},
	{"Retry/Conflict", testRetryConflict},
}

func testCancelAllowed(e *env) {
	now := base.Add(time.Second)
	for _, st := range []store.State{store.StateScheduled, store.StatePending, store.StateRetryWaiting, store.StateRunning} {
		id := "t_" + string(st)
		before := e.makeState(base, nt(id, string(st)), st)
		got, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: id, Now: now})
		e.noErr("CancelTask from "+string(st), err)
		e.eq("state", got.State, store.StateCancelled)
		e.eq("LeaseID", got.LeaseID, "")
		e.eqTime("UpdatedAt", got.UpdatedAt, now)
		e.eq("Attempt", got.Attempt, before.Attempt)
		e.sameTask("GetTask after cancel", e.get(id, ""), got)
	}
	// A cancelled task is never fetched or promoted.
	e.eqIDs("fetch", e.fetch(now, 10))
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: base.Add(2 * time.Hour)})
	e.noErr("PromoteDue", err)
	e.eq("promoted", n, 0)
}

// testCancelLongLease: a running task is cancelled whatever the length of
// its ids (up to store.MaxKeyBytes for the task's) (a caller may choose a long lease id for a direct dispatch): the
// store's own notifications must not make the cancel fail.
func testCancelLongLease(e *env) {
	n := nt("t_"+strings.Repeat("i", store.MaxKeyBytes-2), "a")
	n.Lease = &store.NewLease{LeaseID: strings.Repeat("L", 8000), WorkerID: "w", Duration: time.Minute}
	e.insert(base, n)
	got, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: n.ID, Now: base.Add(time.Second)})
	e.noErr("CancelTask of a running task with long ids", err)
	e.eq("state", got.State, store.StateCancelled)
}

func (e *env) conflict(what string, err error, id string, state store.State, op string) {
	e.t.Helper()
	e.isErr(what, err, store.ErrConflict)
	var ce *store.ConflictError
	if !errors.As(err, &ce) {
		e.t.Fatalf("%s: %v is not a *store.ConflictError", what, err)
	}
	if ce.ID != id || ce.State != state || ce.Op != op {
		e.t.Fatalf("%s: ConflictError{%s, %s, %s}, want {%s, %s, %s}", what, ce.ID, ce.State, ce.Op, id, state, op)
	}
}

func testCancelConflict(e *env) {
	for _, st := range []store.State{store.StateSucceeded, store.StateDead, store.StateCancelled} {
		id := "t_" + string(st)
		before := e.makeState(base, nt(id, string(st)), st)
		_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: id, Now: base.Add(time.Second)})
		e.conflict("CancelTask from "+string(st), err, id, st, "cancel")
		e.sameTask("task after refused cancel", e.get(id, ""), before)
	}
	_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: "nope", Now: base})
	e.isErr("CancelTask(unknown)", err, store.ErrNotFound)
}

func testRetry(e *env) {
	n := nt("t_dead", "a")
	n.Priority = 7
	n.MaxAttempts = 2
	t1 := e.start(base, n)
	o := failRetry(t1, base.Add(time.Second), "E1")
	o.EffectivePrio = 2
	e.mustRecord(base.Add(time.Second), o)
	t2 := e.lease(base.Add(time.Second), "t_dead", "a")
	e.mustRecord(base.Add(2*time.Second), kill(t2, "E2", store.DeadMaxAttempts))
	dead := e.get("t_dead", store.StateDead)
	e.eq("EffectivePrio before retry", dead.EffectivePrio, 2)

	now := base.Add(time.Minute)
	got, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: "t_dead", Now: now})
	e.noErr("RetryTask(dead)", err)
	e.eq("State", got.State, store.StatePending)
	e.eq("Attempt", got.Attempt, 0)
	e.eq("LastError", got.LastError, (*store.ErrorInfo)(nil))
	e.eqTime("FirstFailureAt", got.FirstFailureAt, time.Time{})
	e.eq("DeadReason", got.DeadReason, "")
	e.eq("EffectivePrio", got.EffectivePrio, 7)
	e.eq("Priority", got.Priority, 7)
	e.eq("MaxAttempts", got.MaxAttempts, 2)
	e.eq("LeaseID", got.LeaseID, "")
	e.eq("WorkerID (cleared by a manual retry)", got.WorkerID, "")
	e.eqTime("StartedAt (cleared by a manual retry)", got.StartedAt, time.Time{})
	e.eqTime("UpdatedAt", got.UpdatedAt, now)
	e.sameTask("GetTask after retry", e.get("t_dead", ""), got)
	e.eq("history kept", len(e.attempts("t_dead")), 2)

	t3 := e.lease(now, "t_dead", "a")
	e.eq("Attempt after retry", t3.Attempt, 1)
	e.mustRecord(now, succeed(t3))
	as := e.attempts("t_dead")
	e.eq("history", len(as), 3)
	e.eq("attempt numbers", []int{as[0].Number, as[1].Number, as[2].Number}, []int{1, 2, 1})

	e.makeState(base, nt("t_cancelled", "c"), store.StateCancelled)
	got, err = e.s.RetryTask(e.ctx, store.RetryParams{ID: "t_cancelled", Now: now})
	e.noErr("RetryTask(cancelled)", err)
	e.eq("State", got.State, store.StatePending)
	e.lease(now, "t_cancelled", "c")
}

func testRetryConflict(e *env) {
	for _, st := range []store.State{store.StateScheduled, store.StatePending, store.StateRunning, store.StateRetryWaiting, store.StateSucceeded} {
		id := "t_" + string(st)
		before := e.makeState(base, nt(id, string(st)), st)
		_, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: id, Now: base.Add(time.Second)})
		e.conflict("RetryTask from "+string(st), err, id, st, "retry")
		e.sameTask("task after refused retry", e.get(id, ""), before)
	}
	_, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: "nope", Now: base})
	e.isErr("RetryTask(unknown)", err, store.ErrNotFound)
}
