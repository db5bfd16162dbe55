package storetest

import (
	"time"

	"github.com/retryq/retryq/store"
)

var leaseBehindTests = []testCase{
	{"Insert/LeaseNotAheadOfPending", testInsertLeaseNotAheadOfPending},
}

// testInsertLeaseNotAheadOfPending: a task asking for a lease at insert
// that names its worker's types (NewLease.Types) is leased only when no
// pending task of those types, stored or inserted pending by the same
// call, comes before it in dispatch order; otherwise it is inserted
// pending. Types its worker does not fetch, and tasks after it in dispatch
// order, do not hold it back.
func testInsertLeaseNotAheadOfPending(e *env) {
	leased := func(id, typ string, prio int, runAt time.Duration, types ...string) store.NewTask {
		n := nt(id, typ)
		n.Priority, n.RunAt = prio, base.Add(runAt)
		n.Lease = &store.NewLease{LeaseID: "direct-" + id, WorkerID: "w-direct", Duration: 30 * time.Second, Types: types}
		return n
	}
	plain := func(id, typ string, prio int, runAt time.Duration) store.NewTask {
		n := nt(id, typ)
		n.Priority, n.RunAt = prio, base.Add(runAt)
		return n
	}
	e.insert(base.Add(-time.Minute),
		plain("t_old_b", "b", 5, -time.Minute), // ahead of a priority-5 task due later
		plain("t_low_c", "c", 1, -time.Hour),   // behind any priority-2 task
		plain("t_high_z", "z", 9, -time.Hour),  // of a type the workers do not fetch
	)
	res := e.insert(base,
		leased("t_behind_b", "a", 5, 0, "a", "b"),        // t_old_b comes first: pending
		leased("t_ahead_of_c", "c", 2, 0, "c"),           // before t_low_c: leased
		leased("t_tie_b", "b", 5, -time.Minute, "b"),     // same priority and due time as t_old_b, larger id: pending
		leased("t_first_d", "d", 7, 0, "d"),              // nothing of d pending: leased
		leased("t_after_e", "e", 3, 0, "e"),              // t_pend_e, of this call, comes first: pending
		plain("t_pend_e", "e", 3, -time.Second),          // inserted pending
		leased("t_untyped", "b", 0, 0),                   // no Types: leased as before
		leased("t_later", "a", 9, time.Minute, "a", "b"), // scheduled: never leased, and not pending
	)
	want := map[string]store.State{
		"t_behind_b": store.StatePending, "t_ahead_of_c": store.StateRunning, "t_tie_b": store.StatePending,
		"t_first_d": store.StateRunning, "t_after_e": store.StatePending, "t_pend_e": store.StatePending,
		"t_untyped": store.StateRunning, "t_later": store.StateScheduled,
	}
	for _, r := range res {
		e.eq(r.Task.ID+" state in the result", r.Task.State, want[r.Task.ID])
		e.eq(r.Task.ID+" state stored", e.get(r.Task.ID, "").State, want[r.Task.ID])
		if want[r.Task.ID] != store.StateRunning {
			e.eq(r.Task.ID+" lease", r.Task.LeaseID, "")
			e.eq(r.Task.ID+" attempt", r.Task.Attempt, 0)
		}
	}
	// A later insert sees the tasks this one left pending.
	res = e.insert(base.Add(time.Second), leased("t_next_e", "e", 3, 0, "e"), leased("t_top_e", "e", 4, 0, "e"))
	e.eq("t_next_e state", res[0].Task.State, store.StatePending)
	e.eq("t_top_e state", res[1].Task.State, store.StateRunning)
	e.eqIDs("fetch", e.fetch(base.Add(time.Second), 10, "a", "b", "e"), "t_old_b", "t_tie_b", "t_behind_b", "t_pend_e", "t_after_e", "t_next_e")
}
