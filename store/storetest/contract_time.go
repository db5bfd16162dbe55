package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// contractTimeTests pin the contract's rules on time (every time comes back
// in UTC, to the microsecond, and the caller's Now is the only clock) and
// on Close.
var contractTimeTests = []testCase{
	{"Times/ReturnedInUTC", testTimesReturnedInUTC},
	{"Params/NowNotWallClock", testNowNotWallClock},
	{"Lifecycle/CloseEveryMethod", testCloseEveryMethod},
	{"Lifecycle/CloseWhileBusy", testCloseWhileBusy},
}

// utcChecker checks the times a store returned: each is the zero time or
// in UTC, and check compares it with the time the caller gave, truncated to
// the microsecond.
type utcChecker struct{ e *env }

func (c utcChecker) utc(what string, got time.Time) {
	c.e.t.Helper()
	if !got.IsZero() && got.Location() != time.UTC {
		c.e.t.Errorf("%s: %v is in %v, want UTC", what, got, got.Location())
	}
}

func (c utcChecker) check(what string, got, want time.Time) {
	c.e.t.Helper()
	c.utc(what, got)
	if w := want.Truncate(time.Microsecond); !got.Equal(w) {
		c.e.t.Errorf("%s: got %v, want %v", what, got, w)
	}
}

// task checks that every time of t is in UTC.
func (c utcChecker) task(what string, t store.Task) {
	c.e.t.Helper()
	for name, tm := range map[string]time.Time{"RunAt": t.RunAt, "CreatedAt": t.CreatedAt, "UpdatedAt": t.UpdatedAt,
		"FirstFailureAt": t.FirstFailureAt, "LeaseExpiresAt": t.LeaseExpiresAt, "StartedAt": t.StartedAt} {
		c.utc(fmt.Sprintf("%s of %s (%s)", name, t.ID, what), tm)
	}
}

// testTimesReturnedInUTC: every time a method returns is in UTC (or the
// zero time) whatever the zone of the caller's Now, and is that Now (or
// the time derived from it) truncated to the microsecond.
func testTimesReturnedInUTC(e *env) {
	zone := time.FixedZone("UTC+05:45", 5*3600+45*60)
	at := func(d time.Duration) time.Time { return base.Add(d + 999*time.Nanosecond).In(zone) }
	c := utcChecker{e}
	n := nt("t_1", "a")
	n.RunAt = at(-time.Minute)
	ins := e.insert(at(0), n)[0].Task
	c.task("InsertTasks", ins)
	c.check("inserted RunAt", ins.RunAt, at(-time.Minute))
	c.check("inserted CreatedAt", ins.CreatedAt, at(0))
	c.task("GetTask", e.get("t_1", store.StatePending))

	f := e.fetch(at(time.Second), 1, "a")[0]
	c.task("FetchTasks", f)
	c.check("fetched StartedAt", f.StartedAt, at(time.Second))
	c.check("fetched LeaseExpiresAt", f.LeaseExpiresAt, at(time.Second).Add(leaseDur))
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: at(2 * time.Second), Leases: []store.LeaseRef{
		{TaskID: f.ID, LeaseID: f.LeaseID, ExpiresAt: at(3 * time.Second)}}})
	e.noErr("ExtendLeases", err)
	e.noErr("ExtendLeases entry", errs[0])
	c.check("extended LeaseExpiresAt", e.get("t_1", store.StateRunning).LeaseExpiresAt, at(3*time.Second))
	exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 1, Now: at(time.Hour)})
	e.noErr("ExpiredLeases", err)
	c.task("ExpiredLeases", exp[0])
	w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	c.check("NextLeaseExpiry", w.NextLeaseExpiry, at(3*time.Second))

	e.mustRecord(at(2*time.Second), failRetry(f, at(time.Hour), "E"))
	got := e.get("t_1", store.StateRetryWaiting)
	c.task("after a failure", got)
	c.check("FirstFailureAt", got.FirstFailureAt, at(2*time.Second))
	c.check("retry RunAt", got.RunAt, at(time.Hour))
	w, err = e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	c.check("NextRunAt", w.NextRunAt, at(time.Hour))
	_, err = e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 1, Now: at(time.Hour)})
	e.noErr("PromoteDue", err)
	f = e.lease(at(time.Hour), "t_1", "a")
	e.mustRecord(at(time.Hour+time.Second), kill(f, "E", store.DeadMaxAttempts))
	as := e.attempts("t_1")
	e.eq("attempts", len(as), 2)
	c.check("attempt 1 StartedAt", as[0].StartedAt, at(time.Second))
	c.check("attempt 1 FinishedAt", as[0].FinishedAt, at(2*time.Second))
	c.check("attempt 2 FinishedAt", as[1].FinishedAt, at(time.Hour+time.Second))
	dead, _, err := e.s.ListDead(e.ctx, store.DeadFilter{Limit: 1})
	e.noErr("ListDead", err)
	c.task("ListDead", dead[0])
	c.check("died", dead[0].UpdatedAt, at(time.Hour+time.Second))
	sum, err := e.s.DeadSummary(e.ctx, store.SummaryParams{})
	e.noErr("DeadSummary", err)
	c.check("summary Oldest", sum.Groups[0].Oldest, at(time.Hour+time.Second))
	c.check("summary Newest", sum.Groups[0].Newest, at(time.Hour+time.Second))
	rt, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: "t_1", Now: at(2 * time.Hour)})
	e.noErr("RetryTask", err)
	c.task("RetryTask", rt)
	c.check("retried RunAt", rt.RunAt, at(2*time.Hour))
	ct, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: "t_1", Now: at(3 * time.Hour)})
	e.noErr("CancelTask", err)
	c.task("CancelTask", ct)
	c.check("cancelled UpdatedAt", ct.UpdatedAt, at(3*time.Hour))
	list, _, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: 1})
	e.noErr("ListTasks", err)
	c.task("ListTasks", list[0])
	e.mustRecord(at(4*time.Hour), succeed(e.start(at(4*time.Hour), nt("t_2", "b"))))
	as = e.attempts("t_2") // a success, kept in the task row by both built-in backends
	c.check("success StartedAt", as[0].StartedAt, at(4*time.Hour))
	c.check("success FinishedAt", as[0].FinishedAt, at(4*time.Hour))

	tc, err := e.s.PutType(e.ctx, store.TypeConfig{Type: "a"}, at(0))
	e.noErr("PutType", err)
	c.check("PutType UpdatedAt", tc.UpdatedAt, at(0))
	tc, err = e.s.GetType(e.ctx, "a")
	e.noErr("GetType", err)
	c.check("GetType UpdatedAt", tc.UpdatedAt, at(0))
	tcs, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	c.check("ListTypes UpdatedAt", tcs[0].UpdatedAt, at(0))
	l, err := e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "lead", NodeID: "n1", TTL: time.Minute, Now: at(0)})
	e.noErr("AcquireLeader", err)
	c.check("AcquireLeader ExpiresAt", l.ExpiresAt, at(time.Minute))
	l, err = e.s.GetLeader(e.ctx, "lead")
	e.noErr("GetLeader", err)
	c.check("GetLeader ExpiresAt", l.ExpiresAt, at(time.Minute))
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, store.Node{ID: "n1", Role: "leader", StartedAt: at(0)}, at(time.Second)))
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes", err)
	c.check("node StartedAt", nodes[0].StartedAt, at(0))
	c.check("node LastSeen", nodes[0].LastSeen, at(time.Second))
}

// testNowNotWallClock: the caller's Now is the only clock. With a Now
// decades before the machine's clock, a task due an hour after it is
// scheduled, nothing is promoted before that hour, a lease taken at Now is
// current (and can be extended and completed) until its expiry, a
// leadership lease is held for its TTL, and every stored time is Now's.
func testNowNotWallClock(e *env) {
	past := time.Date(1995, time.June, 1, 12, 0, 0, 0, time.UTC)
	sched := nt("t_sched", "s")
	sched.RunAt = past.Add(time.Hour)
	res := e.insert(past, sched, nt("t_run", "r"))
	e.eq("state of a task due in an hour", res[0].Task.State, store.StateScheduled)
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: past.Add(30 * time.Minute)})
	e.noErr("PromoteDue", err)
	e.eq("promoted before the run time", n, 0)
	w, err := e.s.NextWakeup(e.ctx, store.WakeupParams{})
	e.noErr("NextWakeup", err)
	e.eqTime("NextRunAt", w.NextRunAt, past.Add(time.Hour))

	t := e.lease(past, "t_run", "r")
	exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: past.Add(10 * time.Second)})
	e.noErr("ExpiredLeases", err)
	e.eqIDs("expired 10 s into a 30 s lease", exp)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: past.Add(20 * time.Second), Leases: []store.LeaseRef{
		{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: past.Add(time.Minute)}}})
	e.noErr("ExtendLeases", err)
	e.noErr("heartbeat within the lease", errs[0])
	e.mustRecord(past.Add(50*time.Second), succeed(t))
	got := e.get("t_run", store.StateSucceeded)
	e.eqTime("CreatedAt", got.CreatedAt, past)
	e.eqTime("UpdatedAt", got.UpdatedAt, past.Add(50*time.Second))

	l, err := e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "lead", NodeID: "n1", TTL: 10 * time.Second, Now: past})
	e.noErr("AcquireLeader", err)
	e.eq("leader", l.NodeID, "n1")
	l, err = e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "lead", NodeID: "n2", TTL: 10 * time.Second, Now: past.Add(5 * time.Second)})
	e.noErr("AcquireLeader", err)
	e.eq("leader within the TTL", l.NodeID, "n1")
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, store.Node{ID: "n1", Role: "leader", StartedAt: past}, past))
	nodes, err := e.s.ListNodes(e.ctx, past)
	e.noErr("ListNodes", err)
	e.eq("nodes seen since Now", len(nodes), 1)
	e.eqTime("LastSeen", nodes[0].LastSeen, past)
	tc, err := e.s.PutType(e.ctx, store.TypeConfig{Type: "s"}, past)
	e.noErr("PutType", err)
	e.eqTime("type UpdatedAt", tc.UpdatedAt, past)
	ct, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: "t_sched", Now: past.Add(time.Minute)})
	e.noErr("CancelTask", err)
	e.eqTime("cancelled UpdatedAt", ct.UpdatedAt, past.Add(time.Minute))
}

// testCloseEveryMethod: after Close every method of the interface returns
// an error matching ErrClosed, and Close may be called again.
func testCloseEveryMethod(e *env) {
	e.insert(base, nt("t_1", "a"))
	e.noErr("Close", e.s.Close())
	e.noErr("second Close", e.s.Close())
	ctx, s := e.ctx, e.s
	dead := store.DeadFilter{Limit: 1, Now: base}
	lead := store.LeaderParams{Name: "lead", NodeID: "n1", TTL: time.Minute, Now: base}
	checks := map[string]func() error{
		"InsertTasks": func() error {
			_, err := s.InsertTasks(ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_2", "a")}})
			return err
		},
		"FetchTasks": func() error {
			_, err := s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
			return err
		},
		"RecordOutcomes": func() error {
			_, err := s.RecordOutcomes(ctx, store.OutcomeParams{Now: base, Outcomes: []store.Outcome{{TaskID: "t_1", LeaseID: "x", State: store.StateSucceeded}}})
			return err
		},
		"ExtendLeases": func() error {
			_, err := s.ExtendLeases(ctx, store.ExtendParams{Now: base, Leases: []store.LeaseRef{{TaskID: "t_1", LeaseID: "x", ExpiresAt: base.Add(time.Minute)}}})
			return err
		},
		"ExpiredLeases": func() error {
			_, err := s.ExpiredLeases(ctx, store.ExpiredParams{Limit: 1, Now: base})
			return err
		},
		"PromoteDue": func() error { _, err := s.PromoteDue(ctx, store.PromoteParams{Limit: 1, Now: base}); return err },
		"NextWakeup": func() error { _, err := s.NextWakeup(ctx, store.WakeupParams{}); return err },
		"GetTask":    func() error { _, err := s.GetTask(ctx, "t_1"); return err },
		"ListAttempts": func() error {
			_, err := s.ListAttempts(ctx, "t_1")
			return err
		},
		"ListTasks":  func() error { _, _, err := s.ListTasks(ctx, store.ListParams{Limit: 1}); return err },
		"CancelTask": func() error { _, err := s.CancelTask(ctx, store.CancelParams{ID: "t_1", Now: base}); return err },
		"RetryTask":  func() error { _, err := s.RetryTask(ctx, store.RetryParams{ID: "t_1", Now: base}); return err },
		"ListDead":   func() error { _, _, err := s.ListDead(ctx, dead); return err },
		"DeadSummary": func() error {
			_, err := s.DeadSummary(ctx, store.SummaryParams{})
			return err
		},
		"RedriveDead": func() error { _, err := s.RedriveDead(ctx, dead); return err },
		"PurgeDead":   func() error { _, err := s.PurgeDead(ctx, dead); return err },
		"DeleteFinished": func() error {
			_, err := s.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: base})
			return err
		},
		"Stats":         func() error { _, err := s.Stats(ctx, store.StatsParams{}); return err },
		"PutType":       func() error { _, err := s.PutType(ctx, store.TypeConfig{Type: "a"}, base); return err },
		"GetType":       func() error { _, err := s.GetType(ctx, "a"); return err },
		"ListTypes":     func() error { _, err := s.ListTypes(ctx); return err },
		"AcquireLeader": func() error { _, err := s.AcquireLeader(ctx, lead); return err },
		"ReleaseLeader": func() error { return s.ReleaseLeader(ctx, lead) },
		"GetLeader":     func() error { _, err := s.GetLeader(ctx, "lead"); return err },
		"HeartbeatNode": func() error {
			return s.HeartbeatNode(ctx, store.Node{ID: "n1", Role: "leader", StartedAt: base}, base)
		},
		"ListNodes":  func() error { _, err := s.ListNodes(ctx, time.Time{}); return err },
		"PruneNodes": func() error { _, err := s.PruneNodes(ctx, store.PruneNodesParams{SeenBefore: base}); return err },
		"SchemaVersion": func() error {
			_, _, err := s.SchemaVersion(ctx)
			return err
		},
		"Ping": func() error { return s.Ping(ctx) },
	}
	for name, call := range checks {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			e.t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// testCloseWhileBusy: calls racing with Close each return (none hangs),
// either as if made before it or with ErrClosed; after Close returns, every
// call is ErrClosed.
func testCloseWhileBusy(e *env) {
	const callers = 8
	for i := range 20 {
		e.insert(base, nt(fmt.Sprintf("t_%02d", i), "a"))
	}
	var wg, started sync.WaitGroup
	errs := make(chan error, callers*1000)
	started.Add(callers)
	for w := range callers {
		wg.Go(func() {
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			for i := range 1000 {
				var err error
				switch i % 4 {
				case 0:
					_, err = e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt(fmt.Sprintf("w_%d_%d", w, i), "a")}})
				case 1:
					var ts []store.Task
					ts, err = e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 2, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
					if err == nil && len(ts) > 0 {
						_, err = e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: base, Outcomes: []store.Outcome{succeed(ts[0])}})
					}
				case 2:
					_, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: 5})
				case 3:
					_, err = e.s.GetTask(e.ctx, "t_00")
				}
				if first {
					first = false
					started.Done()
				}
				if err != nil {
					errs <- err
					if errors.Is(err, store.ErrClosed) {
						return
					}
				}
			}
		})
	}
	started.Wait() // every caller has made a call: Close races with the next ones
	e.noErr("Close", e.s.Close())
	_, err := e.s.GetTask(e.ctx, "t_00")
	e.isErr("GetTask after Close", err, store.ErrClosed)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.t.Fatal("calls racing with Close did not return within 30 s")
	}
	close(errs)
	for err := range errs {
		if !errors.Is(err, store.ErrClosed) {
			e.t.Errorf("call racing with Close: %v, want success or ErrClosed", err)
		}
	}
}
