package storetest

import (
	"time"

	"github.com/retryq/retryq/store"
)

var zeroNowTests = []testCase{
	{"Params/ZeroNow", testZeroNow},
}

// testZeroNow: every method that takes the caller's now refuses a zero one
// with ErrInvalid and changes nothing. A zero now is a caller's bug; a
// backend that took it as "year 1" would store tasks created in year 1,
// leases that expired two thousand years ago and a node last seen then.
func testZeroNow(e *env) {
	var zero time.Time
	ctx := e.ctx

	_, err := e.s.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{nt("z_new", "z")}, Now: zero})
	e.isErr("InsertTasks with a zero Now", err, store.ErrInvalid)
	e.notFound("z_new")

	e.insert(base, nt("z_pending", "zp"))
	_, err = e.s.FetchTasks(ctx, store.FetchParams{Types: []string{"zp"}, Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: zero})
	e.isErr("FetchTasks with a zero Now", err, store.ErrInvalid)
	e.get("z_pending", store.StatePending)

	run := e.start(base, nt("z_running", "zr"))
	_, err = e.s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{succeed(run)}, Now: zero})
	e.isErr("RecordOutcomes with a zero Now", err, store.ErrInvalid)
	e.get("z_running", store.StateRunning)

	exp := run.LeaseExpiresAt.Add(time.Minute)
	_, err = e.s.ExtendLeases(ctx, store.ExtendParams{Leases: []store.LeaseRef{{TaskID: run.ID, LeaseID: run.LeaseID, ExpiresAt: exp}}, Now: zero})
	e.isErr("ExtendLeases with a zero Now", err, store.ErrInvalid)
	if got := e.get("z_running", store.StateRunning); !got.LeaseExpiresAt.Equal(run.LeaseExpiresAt) {
		e.t.Errorf("ExtendLeases with a zero Now moved the lease expiry from %v to %v", run.LeaseExpiresAt, got.LeaseExpiresAt)
	}

	_, err = e.s.ExpiredLeases(ctx, store.ExpiredParams{Limit: 10, Now: zero})
	e.isErr("ExpiredLeases with a zero Now", err, store.ErrInvalid)

	e.makeState(base, nt("z_scheduled", "zs"), store.StateScheduled)
	_, err = e.s.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: zero})
	e.isErr("PromoteDue with a zero Now", err, store.ErrInvalid)
	e.get("z_scheduled", store.StateScheduled)

	_, err = e.s.CancelTask(ctx, store.CancelParams{ID: "z_pending", Now: zero})
	e.isErr("CancelTask with a zero Now", err, store.ErrInvalid)
	e.get("z_pending", store.StatePending)

	e.makeState(base, nt("z_dead", "zd"), store.StateDead)
	_, err = e.s.RetryTask(ctx, store.RetryParams{ID: "z_dead", Now: zero})
	e.isErr("RetryTask with a zero Now", err, store.ErrInvalid)
	e.get("z_dead", store.StateDead)

	_, err = e.s.RedriveDead(ctx, store.DeadFilter{Type: "zd", Now: zero})
	e.isErr("RedriveDead with a zero Now", err, store.ErrInvalid)
	e.get("z_dead", store.StateDead)

	_, err = e.s.PutType(ctx, store.TypeConfig{Type: "z_type", Priority: 3}, zero)
	e.isErr("PutType with a zero now", err, store.ErrInvalid)
	_, err = e.s.GetType(ctx, "z_type")
	e.isErr("GetType after a refused PutType", err, store.ErrNotFound)

	_, err = e.s.AcquireLeader(ctx, store.LeaderParams{Name: "z_lead", NodeID: "n1", TTL: time.Minute, Now: zero})
	e.isErr("AcquireLeader with a zero Now", err, store.ErrInvalid)
	l, err := e.s.AcquireLeader(ctx, store.LeaderParams{Name: "z_lead", NodeID: "n2", TTL: time.Minute, Now: base})
	e.noErr("AcquireLeader after a refused one", err)
	e.eq("leader after a refused AcquireLeader", l.NodeID, "n2")

	err = e.s.HeartbeatNode(ctx, store.Node{ID: "z_node", Host: "h", Version: "v", Role: "standby", StartedAt: base}, zero)
	e.isErr("HeartbeatNode with a zero now", err, store.ErrInvalid)
	nodes, err := e.s.ListNodes(ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes after a refused heartbeat", len(nodes), 0)
}
