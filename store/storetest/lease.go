package storetest

import (
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

var leaseTests = []testCase{
	{"Lease/Extend", testExtend},
	{"Lease/Expired", testExpired},
	{"Lease/ExpiredExcludeTypes", testExpiredExcludeTypes},
	{"Lease/NextWakeupExcludeTypes", testNextWakeupExcludeTypes},
	{"Lease/ReaperRace", testReaperRace},
	{"Lease/ExpiryInstant", testLeaseExpiryInstant},
	{"Lease/ExtendOddIDsAreLost", testExtendOddIDs},
	{"Lease/ExtendSameLeaseTwice", testExtendSameLeaseTwice},
}

// testLeaseExpiryInstant: a lease is current up to and including its
// expiry instant, for every method that asks: at that instant a heartbeat
// extends it, the lease is not listed as expired, and the reaper's outcome
// is refused; a moment later the reaper's outcome applies.
func testLeaseExpiryInstant(e *env) {
	a := e.start(base, nt("t_a", "a"))
	exp := a.LeaseExpiresAt
	reap := failRetry(a, exp.Add(time.Hour), "LEASE_EXPIRED")
	reap.ReapExpired, reap.OutcomeKind = true, store.OutcomeLeaseExpired
	e.isErr("reap at the expiry instant", e.record(exp, reap), store.ErrLeaseLost)
	e.get("t_a", store.StateRunning)
	listed, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: exp})
	e.noErr("ExpiredLeases", err)
	e.eqIDs("expired at the expiry instant", listed)
	newExp := exp.Add(leaseDur)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: exp, Leases: []store.LeaseRef{{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: newExp}}})
	e.noErr("ExtendLeases", err)
	e.noErr("heartbeat at the expiry instant", errs[0])
	e.eqTime("extended expiry", e.get("t_a", store.StateRunning).LeaseExpiresAt, newExp)
	e.isErr("reap at the new expiry instant", e.record(newExp, reap), store.ErrLeaseLost)
	e.mustRecord(newExp.Add(time.Millisecond), reap)
	e.get("t_a", store.StateRetryWaiting)
}

// testExtendOddIDs: a heartbeat naming a task or lease id no task can have
// (not UTF-8, a NUL byte) is ErrLeaseLost for that entry alone; the other
// leases of the call are extended, as RecordOutcomes does for outcomes.
func testExtendOddIDs(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	newExp := base.Add(time.Hour)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: base.Add(time.Second), Leases: []store.LeaseRef{
		{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: newExp},
		{TaskID: "t_\x00", LeaseID: a.LeaseID, ExpiresAt: newExp},
		{TaskID: b.ID, LeaseID: b.LeaseID + "\xff", ExpiresAt: newExp},
		{TaskID: "t_\xfe", LeaseID: "L\x00", ExpiresAt: newExp},
		{TaskID: b.ID, LeaseID: b.LeaseID, ExpiresAt: newExp},
	}})
	e.noErr("ExtendLeases with odd ids", err)
	e.eq("errors", len(errs), 5)
	e.noErr("extend a", errs[0])
	for i := 1; i <= 3; i++ {
		e.isErr(fmt.Sprintf("entry %d (odd id)", i), errs[i], store.ErrLeaseLost)
	}
	e.noErr("extend b", errs[4])
	e.eqTime("a's expiry", e.get("t_a", store.StateRunning).LeaseExpiresAt, newExp)
	e.eqTime("b's expiry", e.get("t_b", store.StateRunning).LeaseExpiresAt, newExp)
}

// testExtendSameLeaseTwice: a call naming one lease twice applies its
// entries in order: both succeed and the later expiry is the one kept,
// whichever is further out.
func testExtendSameLeaseTwice(e *env) {
	a := e.start(base, nt("t_a", "a"))
	b := e.start(base, nt("t_b", "a"))
	now := base.Add(time.Second)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
		{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: base.Add(time.Hour)},
		{TaskID: b.ID, LeaseID: b.LeaseID, ExpiresAt: base.Add(2 * time.Hour)},
		{TaskID: a.ID, LeaseID: a.LeaseID, ExpiresAt: base.Add(2 * time.Hour)},
		{TaskID: b.ID, LeaseID: b.LeaseID, ExpiresAt: base.Add(time.Hour)},
		{TaskID: a.ID, LeaseID: "stale", ExpiresAt: base.Add(3 * time.Hour)},
	}})
	e.noErr("ExtendLeases", err)
	e.eq("errors", len(errs), 5)
	for i := range 4 {
		e.noErr(fmt.Sprintf("entry %d", i), errs[i])
	}
	e.isErr("entry under a stale lease", errs[4], store.ErrLeaseLost)
	e.eqTime("a's expiry (the later entry's)", e.get("t_a", store.StateRunning).LeaseExpiresAt, base.Add(2*time.Hour))
	e.eqTime("b's expiry (the later entry's)", e.get("t_b", store.StateRunning).LeaseExpiresAt, base.Add(time.Hour))
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

// testExpiredExcludeTypes: ExpiredLeases leaves out the tasks of the types
// in ExcludeTypes, and the limit counts only the tasks it returns, so a
// caller that cannot decide a type's tasks for now (the reaper, when the
// type's configuration cannot be read) lists past a whole batch of them
// instead of getting that batch back on every call.
func testExpiredExcludeTypes(e *env) {
	// Leases taken a second apart: t_0..t_2 of type a expire first, then
	// t_3 of b, then t_4 of c.
	for i, typ := range []string{"a", "a", "a", "b", "c"} {
		e.start(base.Add(time.Duration(i)*time.Second), nt(fmt.Sprintf("t_%d", i), typ))
	}
	now := base.Add(time.Hour)
	expired := func(limit int, exclude ...string) []store.Task {
		e.t.Helper()
		got, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: limit, Now: now, ExcludeTypes: exclude})
		e.noErr("ExpiredLeases", err)
		return got
	}
	e.eqIDs("without exclusions", expired(3), "t_0", "t_1", "t_2")
	e.eqIDs("excluding a, limit 3", expired(3, "a"), "t_3", "t_4")
	e.eqIDs("excluding a, limit 1", expired(1, "a"), "t_3")
	e.eqIDs("excluding a and c", expired(10, "c", "a"), "t_3")
	e.eqIDs("excluding b", expired(10, "b"), "t_0", "t_1", "t_2", "t_4")
	e.eqIDs("excluding a twice and an unknown type", expired(10, "a", "zzz", "a"), "t_3", "t_4")
	e.eqIDs("excluding every type", expired(10, "a", "b", "c"))
	e.eqIDs("an empty exclusion list", expired(10, []string{}...), "t_0", "t_1", "t_2", "t_3", "t_4")

	// ExpiredLeases changes nothing.
	e.get("t_0", store.StateRunning)
	_, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: now, ExcludeTypes: []string{"a", "b\x00"}})
	e.isErr("excluding a type that is not text", err, store.ErrInvalid)
	many := make([]string, store.MaxExcludeTypes+1)
	for i := range many {
		many[i] = fmt.Sprintf("x%d", i)
	}
	_, err = e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: now, ExcludeTypes: many})
	e.isErr("excluding more than MaxExcludeTypes types", err, store.ErrInvalid)
	e.eqIDs("excluding MaxExcludeTypes types", expired(10, many[:store.MaxExcludeTypes]...), "t_0", "t_1", "t_2", "t_3", "t_4")
}

// testNextWakeupExcludeTypes: NextWakeup's lease expiry leaves out the
// tasks of the types in ExcludeTypes (those the reaper passes over), so
// that their past expiry does not hide the next one; the due time of
// waiting tasks is not filtered.
func testNextWakeupExcludeTypes(e *env) {
	for i, typ := range []string{"a", "a", "b", "c"} {
		e.start(base.Add(time.Duration(i)*time.Second), nt(fmt.Sprintf("t_%d", i), typ))
	}
	due := base.Add(time.Hour)
	e.makeState(base, store.NewTask{ID: "t_w", Type: "a", Payload: []byte("null"), RunAt: due}, store.StateScheduled)
	wake := func(exclude ...string) store.Wakeup {
		e.t.Helper()
		w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{ExcludeTypes: exclude})
		e.noErr("NextWakeup", err)
		return w
	}
	expiry := func(i int) time.Time { return base.Add(time.Duration(i)*time.Second + leaseDur) }
	e.eqTime("lease expiry without exclusions", wake().NextLeaseExpiry, expiry(0))
	e.eqTime("lease expiry excluding a", wake("a").NextLeaseExpiry, expiry(2))
	e.eqTime("lease expiry excluding a and b, twice", wake("b", "a", "b").NextLeaseExpiry, expiry(3))
	e.eqTime("lease expiry excluding every type", wake("a", "b", "c").NextLeaseExpiry, time.Time{})
	e.eqTime("due time excluding a", wake("a").NextRunAt, due)
	_, err := e.s.NextWakeup(e.ctx, store.WakeupParams{ExcludeTypes: []string{"a", "b\x00"}})
	e.isErr("excluding a type that is not text", err, store.ErrInvalid)
	many := make([]string, store.MaxExcludeTypes+1)
	for i := range many {
		many[i] = fmt.Sprintf("x%d", i)
	}
	_, err = e.s.NextWakeup(e.ctx, store.WakeupParams{ExcludeTypes: many})
	e.isErr("excluding more than MaxExcludeTypes types", err, store.ErrInvalid)
	e.eqTime("excluding MaxExcludeTypes types", wake(many[:store.MaxExcludeTypes]...).NextLeaseExpiry, expiry(0))
}
