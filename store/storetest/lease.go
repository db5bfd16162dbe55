package storetest

import (
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

var leaseTests = []testCase{
	{"Lease/Extend", testExtend},
	{"Lease/Expired", testExpired},
	{"Lease/ReaperRace", testReaperRace},
}

func testExtend(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	now := base.Add(20 * time.Second)
	newExp := base.Add(time.Minute)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
		{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: newExp},
		{TaskID: b.ID, LeaseID: "stale", ExpiresAt: newExp},
		{TaskID: "unknown", LeaseID: a.LeaseID, ExpiresAt: newExp},
	}})
	e.noErr("ExtendLeases", err)
	e.eq("errors", len(errs), 3)
	e.noErr("extend a", errs[0])
	e.isErr("extend under a stale lease", errs[1], store.ErrLeaseLost)
	e.isErr("extend an unknown task", errs[2], store.ErrLeaseLost)
	e.eqTime("extended expiry", e.get("t_a", store.StateRunning).LeaseExpiresAt, newExp)
	e.eqTime("untouched expiry", e.get("t_b", store.StateRunning).LeaseExpiresAt, base.Add(leaseDur))

	// b's lease expired at base+30s: it cannot be extended any more.
	late := base.Add(leaseDur + time.Millisecond)
	errs, err = e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: late, Leases: []store.LeaseRef{
		{TaskID: b.ID, LeaseID: b.LeaseID, ExpiresAt: newExp}}})
	e.noErr("ExtendLeases", err)
	e.isErr("extend an expired lease", errs[0], store.ErrLeaseLost)

	// a's extended lease is current past its original expiry.
	e.mustRecord(base.Add(45*time.Second), succeed(a))
	errs, err = e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: base.Add(46 * time.Second), Leases: []store.LeaseRef{
		{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: base.Add(2 * time.Minute)}}})
	e.noErr("ExtendLeases", err)
	e.isErr("extend a finished task", errs[0], store.ErrLeaseLost)
}

func testExpired(e *env) {
	// Leases of 30s taken at base+0s, +5s, +10s; one task extended far out.
	var ts []store.Task
	for i := range 3 {
		ts = append(ts, e.start(base.Add(time.Duration(i)*5*time.Second), nt(fmt.Sprintf("t_%d", i), "a")))
	}
	long := e.start(base, nt("t_long", "a"))
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: base, Leases: []store.LeaseRef{
		{TaskID: long.ID, LeaseID: long.LeaseID, ExpiresAt: base.Add(time.Hour)}}})
	e.noErr("ExtendLeases", err)
	e.noErr("ExtendLeases item", errs[0])
	e.makeState(base, nt("t_pending", "b"), store.StatePending)
	e.makeState(base, nt("t_done", "c"), store.StateSucceeded)
	e.makeState(base, nt("t_sched", "d"), store.StateScheduled)

	expired := func(now time.Time, limit int) []store.Task {
		e.t.Helper()
		got, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: limit, Now: now})
		e.noErr("ExpiredLeases", err)
		return got
	}
	e.eqIDs("at the first expiry instant", expired(base.Add(leaseDur), 10))
	e.eqIDs("just after", expired(base.Add(leaseDur+time.Millisecond), 10), "t_0")
	e.eqIDs("later", expired(base.Add(time.Minute), 10), "t_0", "t_1", "t_2")
	e.eqIDs("with a limit", expired(base.Add(time.Minute), 2), "t_0", "t_1")
	got := expired(base.Add(time.Minute), 1)[0]
	e.sameTask("expired task", got, ts[0])

	// ExpiredLeases changes nothing.
	e.get("t_0", store.StateRunning)
	e.eqIDs("again", expired(base.Add(time.Minute), 10), "t_0", "t_1", "t_2")
	_, err = e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 0, Now: base})
	e.isErr("ExpiredLeases(Limit 0)", err, store.ErrInvalid)
}
