package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

var timeTests = []testCase{
	{"Times/RoundTrip", testTimesRoundTrip},
	{"Times/OutOfRange", testTimesOutOfRange},
	{"Times/FilterOutOfRange", testTimesFilterOutOfRange},
	{"Times/NodeStartOutOfRange", testTimesNodeStartOutOfRange},
	{"Times/LeaseEndOutOfRange", testTimesLeaseEndOutOfRange},
}

// testTimesRoundTrip: a time is stored to the microsecond (rounded down)
// and read back as that same instant, whatever its zone, from before 1970
// and the Unix epoch itself up to the last microsecond of year 9999; the
// task an insert returns carries the times a read returns later. Only the
// zero time means "unset".
func testTimesRoundTrip(e *env) {
	east := time.FixedZone("UTC+05:45", 5*3600+45*60)
	west := time.FixedZone("UTC-09:30", -(9*3600 + 30*60))
	now := base.Add(123456789 * time.Nanosecond).In(east) // sub-microsecond, not UTC
	cases := []struct {
		id    string
		runAt time.Time
		state store.State
	}{
		{"tm_epoch", time.Unix(0, 0), store.StatePending},
		{"tm_before_epoch", time.Date(1969, 7, 20, 20, 17, 40, 500, time.UTC).In(west), store.StatePending},
		{"tm_after_epoch", time.Unix(0, 1500), store.StatePending},
		{"tm_year_1", time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC), store.StatePending},
		{"tm_sub_micro", now.Add(time.Hour + 999*time.Nanosecond), store.StateScheduled},
		{"tm_year_9999", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC).In(east), store.StateScheduled},
	}
	for _, c := range cases {
		n := nt(c.id, "tm")
		n.RunAt = c.runAt
		res := e.insert(now, n)[0]
		want := c.runAt.Truncate(time.Microsecond)
		got := e.get(c.id, c.state)
		if !got.RunAt.Equal(want) {
			e.t.Errorf("task %s: RunAt read back as %v, want %v (stored %v)", c.id, got.RunAt, want, c.runAt)
		}
		if !res.Task.RunAt.Equal(got.RunAt) {
			e.t.Errorf("task %s: insert returned RunAt %v, a read returns %v", c.id, res.Task.RunAt, got.RunAt)
		}
		if !got.CreatedAt.Equal(now.Truncate(time.Microsecond)) || !res.Task.CreatedAt.Equal(got.CreatedAt) {
			e.t.Errorf("task %s: CreatedAt read back as %v, inserted as %v, want %v", c.id, got.CreatedAt, res.Task.CreatedAt, now.Truncate(time.Microsecond))
		}
	}

	// The earliest due time of the far-future task is reported exactly.
	w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	if want := cases[4].runAt.Truncate(time.Microsecond); !w.NextRunAt.Equal(want) {
		e.t.Errorf("NextWakeup.NextRunAt = %v, want %v", w.NextRunAt, want)
	}

	// A lease granted at a sub-microsecond now expires at the microsecond
	// the fetch reported, and a heartbeat to year 9999 is kept exactly.
	leased := e.fetch(now, 1, "tm")
	if len(leased) != 1 {
		e.t.Fatalf("fetch: got %v, want one task", ids(leased))
	}
	l := leased[0]
	if want := now.Add(leaseDur).Truncate(time.Microsecond); !l.LeaseExpiresAt.Equal(want) || !l.StartedAt.Equal(now.Truncate(time.Microsecond)) {
		e.t.Errorf("fetch: lease expires %v, started %v; want %v, %v", l.LeaseExpiresAt, l.StartedAt, want, now.Truncate(time.Microsecond))
	}
	if got := e.get(l.ID, store.StateRunning); !got.LeaseExpiresAt.Equal(l.LeaseExpiresAt) || !got.StartedAt.Equal(l.StartedAt) {
		e.t.Errorf("task %s: read back lease expiry %v and start %v, fetch said %v and %v", l.ID, got.LeaseExpiresAt, got.StartedAt, l.LeaseExpiresAt, l.StartedAt)
	}
	far := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Leases: []store.LeaseRef{{TaskID: l.ID, LeaseID: l.LeaseID, ExpiresAt: far.In(west)}}, Now: now})
	e.noErr("ExtendLeases", err)
	if len(errs) != 1 || errs[0] != nil {
		e.t.Fatalf("ExtendLeases: %v", errs)
	}
	if got := e.get(l.ID, store.StateRunning); !got.LeaseExpiresAt.Equal(far) {
		e.t.Errorf("task %s: lease extended to %v reads back as %v", l.ID, far, got.LeaseExpiresAt)
	}
}

// testTimesOutOfRange: a run time no backend can store (year 300000 does
// not fit in 64 bits of microseconds, nor in PostgreSQL's timestamptz) is
// refused with ErrInvalid, and no task of the batch is inserted; it is not
// stored as some other time (which could run the task at once).
func testTimesOutOfRange(e *env) {
	for _, runAt := range []time.Time{
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(1<<62, 0), // a "never" that wraps around in 64-bit microseconds
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		far := nt("tr_far", "tr")
		far.RunAt = runAt
		_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Tasks: []store.NewTask{nt("tr_ok", "tr"), far}, Now: base})
		e.isErr(fmt.Sprintf("InsertTasks with RunAt %v", runAt), err, store.ErrInvalid)
		e.notFound("tr_far")
		e.notFound("tr_ok")
	}
	if n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: base}); err != nil || n != 0 {
		e.t.Errorf("PromoteDue = %d, %v; want nothing to promote", n, err)
	}

	// A lease extended, or a retry scheduled, to such a time is refused for
	// that entry alone; the task keeps its lease.
	never := time.Unix(1<<62, 0)
	e.insert(base, nt("tr_run", "tr"))
	leased := e.fetch(base, 1, "tr")
	if len(leased) != 1 {
		e.t.Fatalf("fetch: got %v, want one task", ids(leased))
	}
	l := leased[0]
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Leases: []store.LeaseRef{{TaskID: l.ID, LeaseID: l.LeaseID, ExpiresAt: never}}, Now: base})
	e.noErr("ExtendLeases", err)
	if len(errs) != 1 || !errors.Is(errs[0], store.ErrInvalid) {
		e.t.Errorf("ExtendLeases to %v: %v, want ErrInvalid", never, errs)
	}
	errs, err = e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: []store.Outcome{{TaskID: l.ID, LeaseID: l.LeaseID,
		State: store.StateRetryWaiting, OutcomeKind: store.OutcomeFailed, RunAt: never, Error: &store.ErrorInfo{Message: "x"}}}, Now: base})
	e.noErr("RecordOutcomes", err)
	if len(errs) != 1 || !errors.Is(errs[0], store.ErrInvalid) {
		e.t.Errorf("retry at %v: %v, want ErrInvalid", never, errs)
	}
	if got := e.get(l.ID, store.StateRunning); !got.LeaseExpiresAt.Equal(l.LeaseExpiresAt) || got.LeaseID != l.LeaseID {
		e.t.Errorf("after the refused calls the lease is %s until %v, want %s until %v", got.LeaseID, got.LeaseExpiresAt, l.LeaseID, l.LeaseExpiresAt)
	}
}

// testTimesFilterOutOfRange: a time a method filters by (a DeadFilter's
// or a summary's Since and Before, a retention cut-off, the Since of
// Stats, ListNodes and PruneNodes) outside years 1 to 9999 is ErrInvalid,
// as a stored time is, and changes nothing. SQLite's 64-bit microseconds
// and PostgreSQL's timestamptz encoding wrap around out there: a "since"
// far in the future read as long ago matched every dead task (a redrive
// took them all), and a cut-off far in the past read as far in the future
// deleted every finished task.
func testTimesFilterOutOfRange(e *env) {
	e.makeState(base, nt("d_1", "a"), store.StateDead)
	e.makeState(base, nt("s_1", "b"), store.StateSucceeded)
	e.makeState(base, nt("c_1", "c"), store.StateCancelled)
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, store.Node{ID: "n1", Role: "worker"}, base))
	late := []time.Time{
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(1<<62, 0),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	early := []time.Time{
		time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-1<<62, 0),
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	for _, at := range append(late, early...) {
		check := func(what string, err error) {
			e.t.Helper()
			e.isErr(fmt.Sprintf("%s %v", what, at.UTC()), err, store.ErrInvalid)
		}
		_, _, err := e.s.ListDead(e.ctx, store.DeadFilter{Since: at, Limit: 10})
		check("ListDead since", err)
		_, _, err = e.s.ListDead(e.ctx, store.DeadFilter{Before: at, Limit: 10})
		check("ListDead before", err)
		_, err = e.s.DeadSummary(e.ctx, store.SummaryParams{Since: at})
		check("DeadSummary since", err)
		_, err = e.s.RedriveDead(e.ctx, store.DeadFilter{Since: at, Now: base})
		check("RedriveDead since", err)
		_, err = e.s.RedriveDead(e.ctx, store.DeadFilter{Before: at, Now: base})
		check("RedriveDead before", err)
		_, err = e.s.PurgeDead(e.ctx, store.DeadFilter{Since: at})
		check("PurgeDead since", err)
		_, err = e.s.PurgeDead(e.ctx, store.DeadFilter{Before: at})
		check("PurgeDead before", err)
		for _, p := range []store.RetentionParams{{SucceededBefore: at}, {CancelledBefore: at}, {DeadBefore: at}} {
			_, err = e.s.DeleteFinished(e.ctx, p)
			check("DeleteFinished before", err)
		}
		_, err = e.s.Stats(e.ctx, store.StatsParams{Since: at})
		check("Stats since", err)
		_, err = e.s.ListNodes(e.ctx, at)
		check("ListNodes since", err)
		_, err = e.s.PruneNodes(e.ctx, store.PruneNodesParams{SeenBefore: at})
		check("PruneNodes before", err)
	}
	e.get("d_1", store.StateDead)
	e.get("s_1", store.StateSucceeded)
	e.get("c_1", store.StateCancelled)
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes", len(nodes), 1)

	// The ends of the range filter as any other time.
	last, first := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)
	e.eqIDs("dead since the last second of year 9999", e.listDead(store.DeadFilter{Since: last, Limit: 10}))
	e.eqIDs("dead before the first second of year 1", e.listDead(store.DeadFilter{Before: first, Limit: 10}))
	e.eqIDs("dead before the last second of year 9999", e.listDead(store.DeadFilter{Before: last, Limit: 10}), "d_1")
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Since: last, Now: base})
	e.noErr("RedriveDead since year 9999", err)
	e.eq("redriven", n, 0)
	r, err := e.s.DeleteFinished(e.ctx, store.RetentionParams{SucceededBefore: first, CancelledBefore: first, DeadBefore: first})
	e.noErr("DeleteFinished before year 1", err)
	e.eq("deleted before year 1", r, store.RetentionResult{})
	nodes, err = e.s.ListNodes(e.ctx, last)
	e.noErr("ListNodes since year 9999", err)
	e.eq("nodes seen since year 9999", len(nodes), 0)
	r, err = e.s.DeleteFinished(e.ctx, store.RetentionParams{SucceededBefore: last, CancelledBefore: last, DeadBefore: last})
	e.noErr("DeleteFinished before year 9999", err)
	e.eq("deleted before year 9999", r, store.RetentionResult{Succeeded: 1, Cancelled: 1, Dead: 1})
}

// testTimesNodeStartOutOfRange: a node's StartedAt, which HeartbeatNode
// stores, outside years 1 to 9999 is ErrInvalid and stores nothing, as
// every stored time is; SQLite stored it wrapped around (year 300000 read
// back as year -284555), and PostgreSQL refused it as ErrInvalid.
func testTimesNodeStartOutOfRange(e *env) {
	n := store.Node{ID: "n1", Role: "worker", StartedAt: base}
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, n, base))
	for _, at := range []time.Time{time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC)} {
		for _, id := range []string{"n1", "n2"} {
			bad := store.Node{ID: id, Role: "worker", StartedAt: at}
			err := e.s.HeartbeatNode(e.ctx, bad, base.Add(time.Second))
			e.isErr(fmt.Sprintf("HeartbeatNode of %s started at %v", id, at.UTC()), err, store.ErrInvalid)
		}
	}
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes", len(nodes), 1)
	e.eqTime("StartedAt kept", nodes[0].StartedAt, base)
	e.eqTime("LastSeen kept", nodes[0].LastSeen, base)
}

// testTimesLeaseEndOutOfRange: a lease whose expiry (Now plus its length)
// would pass year 9999 is ErrInvalid, as every stored time outside years 1
// to 9999 is, and changes nothing: a fetch, a direct dispatch at insert
// (the batch refused whole) and a leadership lease. Such an expiry was
// stored, and a task carrying it could not be written as RFC 3339 (the
// API's JSON).
func testTimesLeaseEndOutOfRange(e *env) {
	end := time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)
	e.insert(base, nt("t_1", "a"))
	_, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: 2 * time.Hour, Now: end})
	e.isErr("FetchTasks with a lease past year 9999", err, store.ErrInvalid)
	e.get("t_1", store.StatePending)
	got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: 59 * time.Minute, Now: end})
	e.noErr("FetchTasks with a lease to the end of year 9999", err)
	e.eqIDs("fetched", got, "t_1")

	leased := nt("t_2", "a")
	leased.Lease = &store.NewLease{LeaseID: "direct-2", WorkerID: worker, Duration: 2 * time.Hour}
	_, err = e.s.InsertTasks(e.ctx, store.InsertParams{Now: end, Tasks: []store.NewTask{nt("t_3", "a"), leased}})
	e.isErr("InsertTasks with a lease past year 9999", err, store.ErrInvalid)
	e.notFound("t_2")
	e.notFound("t_3")
	leased.RunAt = end.Add(30 * time.Minute) // scheduled: the lease is ignored
	res := e.insert(end, leased)
	e.eq("scheduled task's state", res[0].Task.State, store.StateScheduled)

	_, err = e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "lead", NodeID: "n1", TTL: 2 * time.Hour, Now: end})
	e.isErr("AcquireLeader with a lease past year 9999", err, store.ErrInvalid)
	_, err = e.s.GetLeader(e.ctx, "lead")
	e.isErr("GetLeader after the refused AcquireLeader", err, store.ErrNotFound)
}
