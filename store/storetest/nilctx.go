package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

var nilContextTests = []testCase{
	{"Params/NilContext", testNilContext},
	{"Params/EmptyResults", testEmptyResults},
}

// testNilContext: every method that takes a context refuses a nil one with
// ErrInvalid naming ctx (store.CheckContext), changes nothing, and leaves
// the store usable. Passed on to the driver, a nil context panicked inside
// database/sql, and on SQLite with the pool's lock held: after a recovered
// panic (a server's recovery middleware) every later call hung.
func testNilContext(e *env) {
	t := e.start(base, nt("t_1", "a"))
	e.makeState(base, nt("d_1", "d"), store.StateDead)
	before := e.get("t_1", "")
	now := base.Add(time.Second)
	var ctx context.Context // nil
	calls := []struct {
		name string
		call func() error
	}{
		{"InsertTasks", func() error {
			_, err := e.s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{nt("t_2", "a")}})
			return err
		}},
		{"InsertTasks of no task", func() error {
			_, err := e.s.InsertTasks(ctx, store.InsertParams{Now: now})
			return err
		}},
		{"FetchTasks", func() error {
			_, err := e.s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: now})
			return err
		}},
		{"RecordOutcomes", func() error {
			_, err := e.s.RecordOutcomes(ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{succeed(t)}})
			return err
		}},
		{"RecordOutcomes of no outcome", func() error {
			_, err := e.s.RecordOutcomes(ctx, store.OutcomeParams{Now: now})
			return err
		}},
		{"ExtendLeases", func() error {
			_, err := e.s.ExtendLeases(ctx, store.ExtendParams{Now: now,
				Leases: []store.LeaseRef{{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: now.Add(time.Hour)}}})
			return err
		}},
		{"ExtendLeases of no lease", func() error {
			_, err := e.s.ExtendLeases(ctx, store.ExtendParams{Now: now})
			return err
		}},
		{"ExpiredLeases", func() error {
			_, err := e.s.ExpiredLeases(ctx, store.ExpiredParams{Limit: 1, Now: now})
			return err
		}},
		{"PromoteDue", func() error { _, err := e.s.PromoteDue(ctx, store.PromoteParams{Limit: 1, Now: now}); return err }},
		{"NextWakeup", func() error { _, err := e.s.NextWakeup(ctx, store.WakeupParams{}); return err }},
		{"GetTask", func() error { _, err := e.s.GetTask(ctx, "t_1"); return err }},
		{"ListAttempts", func() error { _, err := e.s.ListAttempts(ctx, "t_1"); return err }},
		{"ListTasks", func() error { _, _, err := e.s.ListTasks(ctx, store.ListParams{Limit: 1}); return err }},
		{"CancelTask", func() error { _, err := e.s.CancelTask(ctx, store.CancelParams{ID: "t_1", Now: now}); return err }},
		{"RetryTask", func() error { _, err := e.s.RetryTask(ctx, store.RetryParams{ID: "d_1", Now: now}); return err }},
		{"ListDead", func() error { _, _, err := e.s.ListDead(ctx, store.DeadFilter{Limit: 1}); return err }},
		{"DeadSummary", func() error { _, err := e.s.DeadSummary(ctx, store.SummaryParams{}); return err }},
		{"RedriveDead", func() error { _, err := e.s.RedriveDead(ctx, store.DeadFilter{Now: now}); return err }},
		{"PurgeDead", func() error { _, err := e.s.PurgeDead(ctx, store.DeadFilter{}); return err }},
		{"DeleteFinished", func() error {
			_, err := e.s.DeleteFinished(ctx, store.RetentionParams{DeadBefore: now.Add(time.Hour)})
			return err
		}},
		{"Stats", func() error { _, err := e.s.Stats(ctx, store.StatsParams{}); return err }},
		{"PutType", func() error { _, err := e.s.PutType(ctx, store.TypeConfig{Type: "x"}, now); return err }},
		{"GetType", func() error { _, err := e.s.GetType(ctx, "x"); return err }},
		{"ListTypes", func() error { _, err := e.s.ListTypes(ctx); return err }},
		{"AcquireLeader", func() error {
			_, err := e.s.AcquireLeader(ctx, store.LeaderParams{Name: "lead", NodeID: "n1", TTL: time.Minute, Now: now})
			return err
		}},
		{"ReleaseLeader", func() error { return e.s.ReleaseLeader(ctx, store.LeaderParams{Name: "lead", NodeID: "n1"}) }},
		{"GetLeader", func() error { _, err := e.s.GetLeader(ctx, "lead"); return err }},
		{"HeartbeatNode", func() error { return e.s.HeartbeatNode(ctx, store.Node{ID: "n1", Role: "worker"}, now) }},
		{"ListNodes", func() error { _, err := e.s.ListNodes(ctx, time.Time{}); return err }},
		{"PruneNodes", func() error { _, err := e.s.PruneNodes(ctx, store.PruneNodesParams{SeenBefore: now}); return err }},
		{"SchemaVersion", func() error { _, _, err := e.s.SchemaVersion(ctx); return err }},
		{"Ping", func() error { return e.s.Ping(ctx) }},
	}
	if c, ok := e.s.(store.DatabaseClock); ok {
		calls = append(calls, struct {
			name string
			call func() error
		}{"DatabaseNow", func() error { _, err := c.DatabaseNow(ctx); return err }})
	}
	for _, c := range calls {
		err := callRecovered(c.call)
		if !errors.Is(err, store.ErrInvalid) {
			e.t.Errorf("%s with a nil context: error %v, want %v", c.name, err, store.ErrInvalid)
		} else if !strings.Contains(err.Error(), "ctx") {
			e.t.Errorf("%s with a nil context: %q does not name ctx", c.name, err)
		}
	}
	if n, ok := e.s.(store.Notifier); ok {
		closedWithin(e, "Wakeups with a nil context", callRecoveredChan(func() <-chan struct{} { return n.Wakeups(ctx) }))
	}
	if n, ok := e.s.(store.TypedNotifier); ok {
		closedWithin(e, "TypedWakeups with a nil context", callRecoveredChan(func() <-chan struct{} {
			ch, _ := n.TypedWakeups(ctx)
			return ch
		}))
	}
	if n, ok := e.s.(store.CancelNotifier); ok {
		closedWithin(e, "Cancellations with a nil context", callRecoveredChan(func() <-chan store.LeaseRef { return n.Cancellations(ctx) }))
	}

	// The store still answers, at once: nothing was left locked.
	done := make(chan error, 1)
	go func() {
		_, err := e.s.GetTask(e.ctx, "t_1")
		if err == nil {
			_, err = e.s.InsertTasks(e.ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{nt("t_after", "a")}})
		}
		done <- err
	}()
	select {
	case err := <-done:
		e.noErr("calls after the nil contexts", err)
	case <-time.After(30 * time.Second):
		e.t.Fatal("the store did not answer within 30s after the calls with a nil context")
	}
	e.sameTask("running task after the calls", e.get("t_1", ""), before)
	e.get("d_1", store.StateDead)
	e.notFound("t_2")
	types, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	e.eq("types", len(types), 0)
}

// callRecovered runs call and turns a panic into an error.
func callRecovered(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return call()
}

// callRecoveredChan runs call and, when it panics, returns a channel that
// is never closed.
func callRecoveredChan[T any](call func() <-chan T) (ch <-chan T) {
	defer func() {
		if recover() != nil {
			ch = make(chan T)
		}
	}()
	return call()
}

// testEmptyResults: a method answering a slice answers an empty one, never
// nil, when there is nothing to answer (docs/storage.md: a caller encoding
// it as JSON writes [] on every backend, not null on some).
func testEmptyResults(e *env) {
	now := base
	ins, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: now})
	e.noErr("InsertTasks of no task", err)
	e.eq("InsertTasks of no task is an empty slice", ins != nil && len(ins) == 0, true)
	fetched, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 5, WorkerID: worker, LeaseDuration: leaseDur, Now: now})
	e.noErr("FetchTasks with nothing due", err)
	e.eq("FetchTasks with nothing due is an empty slice", fetched != nil && len(fetched) == 0, true)
	fetched, err = e.s.FetchTasks(e.ctx, store.FetchParams{Types: []string{"a", "b"}, Limit: 5, WorkerID: worker, LeaseDuration: leaseDur, Now: now})
	e.noErr("FetchTasks of types with nothing due", err)
	e.eq("FetchTasks of types with nothing due is an empty slice", fetched != nil && len(fetched) == 0, true)
	outs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: now})
	e.noErr("RecordOutcomes of no outcome", err)
	e.eq("RecordOutcomes of no outcome is an empty slice", outs != nil && len(outs) == 0, true)
	ext, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now})
	e.noErr("ExtendLeases of no lease", err)
	e.eq("ExtendLeases of no lease is an empty slice", ext != nil && len(ext) == 0, true)
	exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 5, Now: now})
	e.noErr("ExpiredLeases with none", err)
	e.eq("ExpiredLeases with none is an empty slice", exp != nil && len(exp) == 0, true)
	page, _, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: 5})
	e.noErr("ListTasks of none", err)
	e.eq("ListTasks of none is an empty slice", page != nil && len(page) == 0, true)
	page, _, err = e.s.ListDead(e.ctx, store.DeadFilter{Limit: 5})
	e.noErr("ListDead of none", err)
	e.eq("ListDead of none is an empty slice", page != nil && len(page) == 0, true)
	e.insert(now, nt("t_1", "a"))
	atts, err := e.s.ListAttempts(e.ctx, "t_1")
	e.noErr("ListAttempts of a task without attempts", err)
	e.eq("ListAttempts of a task without attempts is an empty slice", atts != nil && len(atts) == 0, true)
	types, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes of none", err)
	e.eq("ListTypes of none is an empty slice", types != nil && len(types) == 0, true)
	nodes, err := e.s.ListNodes(e.ctx, time.Time{})
	e.noErr("ListNodes of none", err)
	e.eq("ListNodes of none is an empty slice", nodes != nil && len(nodes) == 0, true)
}
