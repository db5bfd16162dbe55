package storetest

import (
	"errors"
	"time"

	"github.com/retryq/retryq/store"
)

var oddTextTests = []testCase{
	{"Params/OddText", testOddText},
}

// testOddText: text that is not valid UTF-8 or holds a NUL byte, which no
// stored task, type, node or lease can have (store.ValidText), gets the
// same answer from every backend, never a database's encoding error: a
// lookup by such an id finds nothing (ErrNotFound), a filter naming it
// matches nothing, a cursor holding it is ErrInvalid, and a write that
// would store it (a fetch's worker id, a type's name, a node's fields, a
// leadership lease's name) is ErrInvalid and changes nothing.
func testOddText(e *env) {
	ctx := e.ctx
	odd := []string{"x\x00", "x\xff"}
	e.makeState(base, nt("d_1", "dead"), store.StateDead)
	e.insert(base, nt("p_1", "pend"))
	for _, id := range odd {
		_, err := e.s.GetTask(ctx, id)
		e.isErr("GetTask", err, store.ErrNotFound)
		_, err = e.s.ListAttempts(ctx, id)
		e.isErr("ListAttempts", err, store.ErrNotFound)
		_, err = e.s.CancelTask(ctx, store.CancelParams{ID: id, Now: base})
		e.isErr("CancelTask", err, store.ErrNotFound)
		_, err = e.s.RetryTask(ctx, store.RetryParams{ID: id, Now: base})
		e.isErr("RetryTask", err, store.ErrNotFound)
		_, err = e.s.GetType(ctx, id)
		e.isErr("GetType", err, store.ErrNotFound)

		ts, _, err := e.s.ListTasks(ctx, store.ListParams{Type: id, Limit: 10})
		e.noErr("ListTasks of an odd type", err)
		e.eqIDs("ListTasks of an odd type", ts)
		_, _, err = e.s.ListTasks(ctx, store.ListParams{Cursor: id, Limit: 10})
		e.isErr("ListTasks with an odd cursor", err, store.ErrInvalid)
		_, _, err = e.s.ListDead(ctx, store.DeadFilter{Cursor: id, Limit: 10})
		e.isErr("ListDead with an odd cursor", err, store.ErrInvalid)
		for _, f := range []store.DeadFilter{{Type: id}, {ErrorCode: id}, {Reason: id}, {IDs: []string{id}}} {
			f.Limit = 10
			ts, _, err := e.s.ListDead(ctx, f)
			e.noErr("ListDead with an odd filter", err)
			e.eqIDs("ListDead with an odd filter", ts)
			f.Limit, f.Now = 0, base.Add(time.Hour)
			n, err := e.s.RedriveDead(ctx, f)
			e.noErr("RedriveDead with an odd filter", err)
			e.eq("redriven by an odd filter", n, 0)
			n, err = e.s.PurgeDead(ctx, f)
			e.noErr("PurgeDead with an odd filter", err)
			e.eq("purged by an odd filter", n, 0)
		}
		ts, _, err = e.s.ListDead(ctx, store.DeadFilter{IDs: []string{id, "d_1"}, Limit: 10})
		e.noErr("ListDead of an odd id and a dead one", err)
		e.eqIDs("ListDead of an odd id and a dead one", ts, "d_1")

		for what, err := range map[string]error{
			"FetchTasks by an odd worker": func() error {
				_, err := e.s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: id, LeaseDuration: leaseDur, Now: base})
				return err
			}(),
			"FetchTasks of an odd type": func() error {
				_, err := e.s.FetchTasks(ctx, store.FetchParams{Types: []string{"pend", id}, Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
				return err
			}(),
			"PutType of an odd name": func() error {
				_, err := e.s.PutType(ctx, store.TypeConfig{Type: id}, base)
				return err
			}(),
			"HeartbeatNode with an odd id":   e.s.HeartbeatNode(ctx, store.Node{ID: id, Role: "worker"}, base),
			"HeartbeatNode with an odd host": e.s.HeartbeatNode(ctx, store.Node{ID: "n1", Host: id, Role: "worker"}, base),
			"AcquireLeader of an odd name": func() error {
				_, err := e.s.AcquireLeader(ctx, store.LeaderParams{Name: id, NodeID: "n1", TTL: time.Minute, Now: base})
				return err
			}(),
			"AcquireLeader for an odd node": func() error {
				_, err := e.s.AcquireLeader(ctx, store.LeaderParams{Name: "lead", NodeID: id, TTL: time.Minute, Now: base})
				return err
			}(),
		} {
			if !errors.Is(err, store.ErrInvalid) {
				e.t.Errorf("%s %q: %v, want ErrInvalid", what, id, err)
			}
		}
		e.noErr("ReleaseLeader of an odd name (held by nobody)", e.s.ReleaseLeader(ctx, store.LeaderParams{Name: id, NodeID: "n1"}))
	}
	e.get("p_1", store.StatePending)
	e.get("d_1", store.StateDead)
	types, err := e.s.ListTypes(ctx)
	e.noErr("ListTypes", err)
	e.eq("types stored", len(types), 0)
	nodes, err := e.s.ListNodes(ctx, time.Time{})
	e.noErr("ListNodes", err)
	e.eq("nodes stored", len(nodes), 0)
	l, err := e.s.AcquireLeader(ctx, store.LeaderParams{Name: "lead", NodeID: "n2", TTL: time.Minute, Now: base})
	e.noErr("AcquireLeader", err)
	e.eq("leader after the refused calls", l.NodeID, "n2")
}
