package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// UpgradeFixture is what a backend's upgrade test writes, in an older
// schema layout, before it opens the database with the current binary:
// tasks in every state (a running one holding a lease, keyed ones, one
// scheduled, one waiting for its retry, one dead with its history), their
// attempt rows, and task types (one with a push target). Each backend
// writes the rows in its own old layouts; CheckUpgradeFixture checks them
// through the storage contract.
type UpgradeFixture struct {
	// Started is the fixture's clock origin: every time in it is Started
	// plus whole seconds, and Now is the time the checks act at.
	Started time.Time
	Now     time.Time
	// Tasks are the task rows, as GetTask must return them.
	Tasks []store.Task
	// Attempts are the history rows of failed attempts, in order. Success
	// is the succeeded task's final attempt: an attempts row in the
	// layouts before success_in_task_row, the task row's detail after.
	Attempts []store.Attempt
	Success  store.Attempt
	// Types are the task types' rows, as GetType must return them.
	Types []store.TypeConfig
}

// NewUpgradeFixture returns the fixture whose times are started plus
// whole seconds.
func NewUpgradeFixture(started time.Time) UpgradeFixture {
	at := func(s int) time.Time { return started.Add(time.Duration(s) * time.Second) }
	failed := func(task, typ string, n int, code, class string, s int) store.Attempt {
		return store.Attempt{TaskID: task, TaskType: typ, Number: n, WorkerID: "w", StartedAt: at(s), FinishedAt: at(s + 1),
			Outcome: store.OutcomeFailed, Error: &store.ErrorInfo{Code: code, Message: "failed: " + code, Class: class},
			Delay: 2 * time.Second}
	}
	task := func(id, typ string, state store.State, payload string) store.Task {
		return store.Task{ID: id, Type: typ, Payload: json.RawMessage(payload), State: state, MaxAttempts: 5,
			RunAt: at(0), CreatedAt: at(0), UpdatedAt: at(0)}
	}
	ok := task("ok", "t", store.StateSucceeded, `{"a":1}`)
	ok.Attempt, ok.WorkerID, ok.StartedAt, ok.UpdatedAt = 1, "w", at(0), at(1)
	bad := task("bad", "t", store.StateDead, `{"b":2}`)
	bad.Attempt, bad.FirstFailureAt, bad.UpdatedAt, bad.DeadReason = 1, at(1), at(1), "non_retryable"
	bad.LastError = &store.ErrorInfo{Code: "E400", Message: "failed: E400", Class: "permanent"}
	// Bytes a JSON re-encoding would change: spaces, escapes, key order.
	pend := task("pend", "t", store.StatePending, "{ \"z\" : \"\\u00e9\\n\", \"a\" : [1, 2.50] }")
	pend.IdempotencyKey, pend.Priority, pend.EffectivePrio = "k-pend", 3, 3
	sched := task("sched", "t", store.StateScheduled, `{"later":true}`)
	sched.RunAt = at(3600)
	wait := task("wait", "t", store.StateRetryWaiting, `{"c":3}`)
	wait.Attempt, wait.FirstFailureAt, wait.UpdatedAt, wait.RunAt, wait.LastDelay = 1, at(1), at(1), at(3), 2*time.Second
	wait.LastError = &store.ErrorInfo{Code: "E503", Message: "failed: E503", Class: "transient"}
	wait.Priority, wait.EffectivePrio = 2, 1
	run := task("run", "push", store.StateRunning, `{"d":4}`)
	run.Attempt, run.FirstFailureAt, run.UpdatedAt, run.LastDelay = 2, at(1), at(3), 2*time.Second
	run.LastError = &store.ErrorInfo{Code: "E503", Message: "failed: E503", Class: "transient"}
	run.LeaseID, run.LeaseExpiresAt, run.WorkerID, run.StartedAt = "lease-1", at(33), "w2", at(3)
	gone := task("gone", "t", store.StateCancelled, `null`)
	gone.IdempotencyKey, gone.UpdatedAt = "k-gone", at(2)
	return UpgradeFixture{
		Started: started,
		Now:     at(10),
		Tasks:   []store.Task{ok, bad, pend, sched, wait, run, gone},
		Attempts: []store.Attempt{
			failed("bad", "t", 1, "E400", "permanent", 0),
			failed("wait", "t", 1, "E503", "transient", 0),
			failed("run", "push", 1, "E503", "transient", 0),
		},
		Success: store.Attempt{TaskID: "ok", TaskType: "t", Number: 1, WorkerID: "w", StartedAt: at(0), FinishedAt: at(1),
			Outcome: store.OutcomeSucceeded, Detail: "200 OK"},
		Types: []store.TypeConfig{
			{Type: "push", Target: json.RawMessage(`{"url":"http://127.0.0.1:9/hook","timeout":"5s"}`), UpdatedAt: at(0)},
			{Type: "t", Policy: json.RawMessage(`{"max_attempts":5}`), Timeout: 1000, Priority: 3, UpdatedAt: at(0)},
		},
	}
}

// CheckUpgradeFixture checks, after an upgrade, the fixture fx a backend's
// upgrade test wrote in an older schema layout: every task reads back the
// same (state, payload bytes, attempts, error, lease), with its history,
// and every type with its settings; then the tasks still work: keys
// deduplicate, the due retry is promoted and fetched, the expired lease is
// reaped, the dead task is found by every filter and redriven, and
// retention deletes the finished tasks and counts them.
func CheckUpgradeFixture(ctx context.Context, t *testing.T, st store.Store, fx UpgradeFixture) {
	t.Helper()
	for _, want := range fx.Tasks {
		got, err := st.GetTask(ctx, want.ID)
		if err != nil {
			t.Errorf("GetTask(%s): %v", want.ID, err)
			continue
		}
		if !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("payload of %s = %q, want %q", want.ID, got.Payload, want.Payload)
		}
		g, w := got, want
		g.Payload, w.Payload = nil, nil
		if !reflect.DeepEqual(normalTask(g), normalTask(w)) {
			t.Errorf("GetTask(%s) after the upgrade:\n got %+v\nwant %+v", want.ID, g, w)
		}
		wantHistory := historyOf(fx, want.ID)
		h, err := st.ListAttempts(ctx, want.ID)
		if err != nil || !reflect.DeepEqual(normalAttempts(h), normalAttempts(wantHistory)) {
			t.Errorf("history of %s = %+v, %v; want %+v", want.ID, h, err, wantHistory)
		}
	}
	types, err := st.ListTypes(ctx)
	sort.Slice(types, func(i, j int) bool { return types[i].Type < types[j].Type })
	if err != nil || !reflect.DeepEqual(normalTypes(types), normalTypes(fx.Types)) {
		t.Errorf("ListTypes = %+v, %v; want %+v", types, err, fx.Types)
	}
	if t.Failed() {
		return // the rest acts on these tasks
	}

	// Keys still deduplicate, the cancelled task's too.
	res, err := st.InsertTasks(ctx, store.InsertParams{Now: fx.Now, Tasks: []store.NewTask{
		{ID: "dup1", Type: "t", Payload: json.RawMessage(`{}`), IdempotencyKey: "k-pend"},
		{ID: "dup2", Type: "t", Payload: json.RawMessage(`{}`), IdempotencyKey: "k-gone"},
	}})
	if err != nil || len(res) != 2 || !res[0].Duplicate || res[0].Task.ID != "pend" || !res[1].Duplicate || res[1].Task.ID != "gone" {
		t.Errorf("InsertTasks of the fixture's keys = %+v, %v; want the existing tasks as duplicates", res, err)
	}
	// The dead task is found by each filter, through the indexes a later
	// migration built over the rows already there.
	for _, f := range []store.DeadFilter{{}, {Type: "t"}, {ErrorCode: "E400"}, {Reason: "non_retryable"},
		{Type: "t", ErrorCode: "E400", Reason: "non_retryable"}} {
		f.Limit = 10
		if ts, _, err := st.ListDead(ctx, f); err != nil || len(ts) != 1 || ts[0].ID != "bad" {
			t.Errorf("ListDead(%+v) = %d tasks, %v; want the dead task", f, len(ts), err)
		}
	}
	// The due retry is promoted (the scheduled task is not due), and it
	// and the pending task are fetched, higher priority first.
	if n, err := st.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: fx.Now}); err != nil || n != 1 {
		t.Errorf("PromoteDue = %d, %v; want the due retry", n, err)
	}
	leased, err := st.FetchTasks(ctx, store.FetchParams{Limit: 10, WorkerID: "w3", LeaseDuration: time.Minute, Now: fx.Now})
	if err != nil || len(leased) != 2 || leased[0].ID != "pend" || leased[1].ID != "wait" || leased[1].Attempt != 2 {
		t.Errorf("FetchTasks = %+v, %v; want pend, then wait at its second attempt", leased, err)
	}
	// The running task's lease expires and is reaped into its history.
	expired, err := st.ExpiredLeases(ctx, store.ExpiredParams{Limit: 10, Now: fx.Now.Add(time.Minute)})
	if err != nil || len(expired) != 1 || expired[0].ID != "run" {
		t.Fatalf("ExpiredLeases = %+v, %v; want the running task", expired, err)
	}
	reap := store.Outcome{TaskID: "run", LeaseID: "lease-1", State: store.StateRetryWaiting, RunAt: fx.Now.Add(2 * time.Minute),
		Error:       &store.ErrorInfo{Code: "LEASE_EXPIRED", Message: "lease expired", Class: "lease_expired"},
		ReapExpired: true, OutcomeKind: store.OutcomeLeaseExpired}
	if errs, err := st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{reap}, Now: fx.Now.Add(time.Minute)}); err != nil || len(errs) != 1 || errs[0] != nil {
		t.Errorf("reap of the running task: %v, %v", errs, err)
	}
	if h, err := st.ListAttempts(ctx, "run"); err != nil || len(h) != 2 || h[1].Outcome != store.OutcomeLeaseExpired || h[1].WorkerID != "w2" {
		t.Errorf("history of the reaped task = %+v, %v; want its failure, then its expired lease of w2", h, err)
	}
	// The dead task is redriven; retention deletes the succeeded and
	// cancelled tasks and counts them.
	if n, err := st.RedriveDead(ctx, store.DeadFilter{Type: "t", Now: fx.Now}); err != nil || n != 1 {
		t.Errorf("RedriveDead = %d, %v; want the dead task", n, err)
	}
	if task, err := st.GetTask(ctx, "bad"); err != nil || task.State != store.StatePending || task.Attempt != 0 {
		t.Errorf("redriven task = %+v, %v; want pending at attempt 0", task, err)
	}
	del, err := st.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: fx.Now, CancelledBefore: fx.Now, DeadBefore: fx.Now, Limit: 10})
	if err != nil || del != (store.RetentionResult{Succeeded: 1, Cancelled: 1}) {
		t.Errorf("DeleteFinished = %+v, %v; want the succeeded and the cancelled task", del, err)
	}
	if _, err := st.GetTask(ctx, "ok"); err == nil {
		t.Errorf("the succeeded task outlived retention")
	}
}

// historyOf returns the history ListAttempts must give task id: its
// failed attempts, then its success if it succeeded.
func historyOf(fx UpgradeFixture, id string) []store.Attempt {
	var h []store.Attempt
	for _, a := range fx.Attempts {
		if a.TaskID == id {
			h = append(h, a)
		}
	}
	if fx.Success.TaskID == id {
		h = append(h, fx.Success)
	}
	return h
}

// normalTask returns t with its times in UTC, so that tasks compare with
// reflect.DeepEqual whatever location a backend reads times in.
func normalTask(t store.Task) store.Task {
	for _, p := range []*time.Time{&t.RunAt, &t.CreatedAt, &t.UpdatedAt, &t.FirstFailureAt, &t.LeaseExpiresAt, &t.StartedAt} {
		*p = p.UTC()
	}
	return t
}

// normalAttempts is normalTask for history rows.
func normalAttempts(as []store.Attempt) []store.Attempt {
	out := make([]store.Attempt, len(as))
	for i, a := range as {
		a.StartedAt, a.FinishedAt = a.StartedAt.UTC(), a.FinishedAt.UTC()
		out[i] = a
	}
	return out
}

// normalTypes is normalTask for task types; an empty JSON document is nil.
func normalTypes(ts []store.TypeConfig) []store.TypeConfig {
	out := make([]store.TypeConfig, len(ts))
	for i, tc := range ts {
		tc.UpdatedAt = tc.UpdatedAt.UTC()
		if len(tc.Policy) == 0 {
			tc.Policy = nil
		}
		if len(tc.Target) == 0 {
			tc.Target = nil
		}
		out[i] = tc
	}
	return out
}
