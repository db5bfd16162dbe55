package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// base is the suite's clock origin.
var base = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// leaseDur is the lease duration of every fetch made by the helpers.
const leaseDur = 30 * time.Second

const worker = "worker-1"

// env bundles a subtest's store with assertion helpers.
type env struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
}

func newEnv(t *testing.T, s store.Store) *env {
	return &env{t: t, s: s, ctx: t.Context()}
}

// nt returns a new task of the given type with a small JSON payload.
func nt(id, typ string) store.NewTask {
	return store.NewTask{ID: id, Type: typ, Payload: json.RawMessage(`{"id":"` + id + `"}`)}
}

func (e *env) insert(now time.Time, ts ...store.NewTask) []store.InsertResult {
	e.t.Helper()
	res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Tasks: ts, Now: now})
	if err != nil {
		e.t.Fatalf("InsertTasks: %v", err)
	}
	if len(res) != len(ts) {
		e.t.Fatalf("InsertTasks returned %d results for %d tasks", len(res), len(ts))
	}
	return res
}

func (e *env) fetch(now time.Time, limit int, types ...string) []store.Task {
	e.t.Helper()
	ts, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: types, Limit: limit, WorkerID: worker, LeaseDuration: leaseDur, Now: now})
	if err != nil {
		e.t.Fatalf("FetchTasks: %v", err)
	}
	if len(ts) > limit {
		e.t.Fatalf("FetchTasks returned %d tasks, limit %d", len(ts), limit)
	}
	return ts
}

// start inserts n at now and leases it (it must be the first pending task
// of its type).
func (e *env) start(now time.Time, n store.NewTask) store.Task {
	e.t.Helper()
	e.insert(now, n)
	return e.lease(now, n.ID, n.Type)
}

// lease fetches the next pending task of typ and checks it is id.
func (e *env) lease(now time.Time, id, typ string) store.Task {
	e.t.Helper()
	got := e.fetch(now, 1, typ)
	if len(got) != 1 || got[0].ID != id {
		e.t.Fatalf("fetch of type %s: got %v, want task %s", typ, ids(got), id)
	}
	return got[0]
}

// record applies one outcome and returns its per-item error.
func (e *env) record(now time.Time, o store.Outcome) error {
	e.t.Helper()
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: []store.Outcome{o}, Now: now})
	if err != nil {
		e.t.Fatalf("RecordOutcomes: %v", err)
	}
	if len(errs) != 1 {
		e.t.Fatalf("RecordOutcomes returned %d errors for 1 outcome", len(errs))
	}
	return errs[0]
}

func (e *env) mustRecord(now time.Time, o store.Outcome) {
	e.t.Helper()
	if err := e.record(now, o); err != nil {
		e.t.Fatalf("outcome %s of task %s: %v", o.State, o.TaskID, err)
	}
}

func succeed(t store.Task) store.Outcome {
	return store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
}

func failRetry(t store.Task, runAt time.Time, code string) store.Outcome {
	return store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateRetryWaiting, RunAt: runAt,
		EffectivePrio: t.EffectivePrio, Error: &store.ErrorInfo{Code: code, Message: "failed: " + code, Class: "transient"},
		LastDelay: 10 * time.Second, OutcomeKind: store.OutcomeFailed}
}

func kill(t store.Task, code, reason string) store.Outcome {
	return store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateDead, DeadReason: reason,
		Error: &store.ErrorInfo{Code: code, Message: "failed: " + code, Class: "permanent"}, OutcomeKind: store.OutcomeFailed}
}

// makeState creates task n in the given state at now.
func (e *env) makeState(now time.Time, n store.NewTask, st store.State) store.Task {
	e.t.Helper()
	switch st {
	case store.StateScheduled:
		n.RunAt = now.Add(time.Hour)
		e.insert(now, n)
	case store.StatePending:
		e.insert(now, n)
	case store.StateRunning:
		e.start(now, n)
	case store.StateRetryWaiting:
		e.mustRecord(now, failRetry(e.start(now, n), now.Add(time.Hour), "E_RETRY"))
	case store.StateSucceeded:
		e.mustRecord(now, succeed(e.start(now, n)))
	case store.StateDead:
		e.mustRecord(now, kill(e.start(now, n), "E_DEAD", store.DeadMaxAttempts))
	case store.StateCancelled:
		e.insert(now, n)
		if _, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: n.ID, Now: now}); err != nil {
			e.t.Fatalf("CancelTask: %v", err)
		}
	default:
		e.t.Fatalf("makeState: unknown state %q", st)
	}
	return e.get(n.ID, st)
}

// get returns a task and, when want is set, checks its state.
func (e *env) get(id string, want store.State) store.Task {
	e.t.Helper()
	t, err := e.s.GetTask(e.ctx, id)
	if err != nil {
		e.t.Fatalf("GetTask(%s): %v", id, err)
	}
	if t.ID != id {
		e.t.Fatalf("GetTask(%s) returned task %s", id, t.ID)
	}
	if want != "" && t.State != want {
		e.t.Fatalf("task %s is %s, want %s", id, t.State, want)
	}
	return t
}

func (e *env) attempts(id string) []store.Attempt {
	e.t.Helper()
	as, err := e.s.ListAttempts(e.ctx, id)
	if err != nil {
		e.t.Fatalf("ListAttempts(%s): %v", id, err)
	}
	return as
}

func (e *env) notFound(id string) {
	e.t.Helper()
	if _, err := e.s.GetTask(e.ctx, id); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetTask(%s) = %v, want ErrNotFound", id, err)
	}
}

// counts returns the per-state counts of all types together.
func (e *env) counts() map[store.State]int {
	e.t.Helper()
	st, err := e.s.Stats(e.ctx, store.StatsParams{})
	if err != nil {
		e.t.Fatalf("Stats: %v", err)
	}
	c := map[store.State]int{}
	for _, ts := range st {
		for k, v := range ts.Counts {
			c[k] += v
		}
	}
	return c
}

func (e *env) isErr(what string, err, want error) {
	e.t.Helper()
	if !errors.Is(err, want) {
		e.t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func (e *env) noErr(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

func ids(ts []store.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func (e *env) eqIDs(what string, got []store.Task, want ...string) {
	e.t.Helper()
	g := ids(got)
	if len(want) == 0 {
		want = []string{}
	}
	if !reflect.DeepEqual(g, want) {
		e.t.Fatalf("%s: got %v, want %v", what, g, want)
	}
}

func (e *env) eqTime(what string, got, want time.Time) {
	e.t.Helper()
	if !got.Equal(want) {
		e.t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func (e *env) eq(what string, got, want any) {
	e.t.Helper()
	if !reflect.DeepEqual(got, want) {
		e.t.Fatalf("%s: got %#v, want %#v", what, got, want)
	}
}

// jsonEqual reports whether a and b are the same JSON document (or both
// empty).
func jsonEqual(a, b []byte) bool {
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b))
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// sameTask compares every field of two tasks (times with Equal, payloads as
// JSON).
func (e *env) sameTask(what string, got, want store.Task) {
	e.t.Helper()
	if d := diffTask(got, want); d != "" {
		e.t.Fatalf("%s: task %s differs: %s", what, want.ID, d)
	}
}

func diffTask(got, want store.Task) string {
	if !jsonEqual(got.Payload, want.Payload) {
		return fmt.Sprintf("Payload %s, want %s", got.Payload, want.Payload)
	}
	g, w := got, want
	g.Payload, w.Payload = nil, nil
	for _, p := range []*store.Task{&g, &w} {
		for _, tm := range []*time.Time{&p.RunAt, &p.CreatedAt, &p.UpdatedAt, &p.FirstFailureAt, &p.LeaseExpiresAt, &p.StartedAt} {
			if tm.IsZero() {
				*tm = time.Time{}
			} else {
				*tm = tm.UTC()
			}
		}
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("\n got %+v\nwant %+v", g, w)
	}
	return ""
}
