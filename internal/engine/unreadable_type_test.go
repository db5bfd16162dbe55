package engine

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// The tests here check one rule: an attempt of a task whose type's
// configuration cannot be read (here a policy with a field this binary does
// not know, as a newer version writes during a rolling upgrade) is never
// decided under the engine's defaults. The stored policy allows one attempt
// (a failure is dead at once); the defaults retry after an hour. Before, a
// handler ran under the default timeout and its failure, like a push
// delivery's, was retried under the defaults (attempt counted), and a pull
// worker's report failed with the decoding error. Now the task is held
// back: nothing runs, the attempt is not counted, nothing is recorded in
// the history, and the task waits as retry_waiting for unreadableTypeDelay.

// unreadablePolicy is a stored policy this binary cannot decode.
const unreadablePolicy = `{"max_attempts":1,"field_from_a_newer_version":1}`

// hourDefaults is an engine default policy that retries after an hour.
func hourDefaults() retry.Policy {
	return retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Hour, MaxDelay: time.Hour, Jitter: retry.JitterNone, MaxAttempts: 5}
}

// putUnreadableTask stores an undecodable configuration of typ (with the
// push target, when given) and inserts one task of it, due now.
func putUnreadableTask(t *testing.T, st store.Store, typ string, target []byte) string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	if _, err := st.PutType(ctx, store.TypeConfig{Type: typ, Policy: []byte(unreadablePolicy), Target: target}, now); err != nil {
		t.Fatalf("put type: %v", err)
	}
	id := NewID(now)
	if _, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: id, Type: typ, Payload: []byte("null"), RunAt: now}}}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	return id
}

// checkHeldBack checks that task id was held back: retry_waiting for about
// unreadableTypeDelay, its attempt not counted, no history.
func checkHeldBack(t *testing.T, st store.Store, id string, since time.Time) {
	t.Helper()
	ctx := context.Background()
	var tk store.Task
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if tk, err = st.GetTask(ctx, id); err != nil {
			t.Fatalf("get: %v", err)
		}
		if tk.State != store.StatePending && tk.State != store.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still %s after 10 s", tk.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tk.State != store.StateRetryWaiting || tk.Attempt != 0 {
		t.Fatalf("task: %s, attempt %d, last error %+v; want retry_waiting with the attempt not counted (held back, not decided under the defaults)",
			tk.State, tk.Attempt, tk.LastError)
	}
	if lo, hi := since.Add(unreadableTypeDelay), time.Now().Add(unreadableTypeDelay); tk.RunAt.Before(lo.Add(-time.Millisecond)) || tk.RunAt.After(hi) {
		t.Fatalf("RunAt = %v; want between %v and %v", tk.RunAt, lo, hi)
	}
	as, err := st.ListAttempts(ctx, id)
	if err != nil || len(as) != 0 {
		t.Fatalf("history = %+v, %v; want none", as, err)
	}
}

func TestHandlerOfAnUnreadableTypeIsHeldBack(t *testing.T) {
	backendtest.Run(t, testHandlerOfAnUnreadableTypeIsHeldBack)
}

func testHandlerOfAnUnreadableTypeIsHeldBack(t *testing.T, backend string) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, backend)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, DefaultPolicy: hourDefaults()})
	good := TypeSpec{Type: "bad.local", Policy: retry.Policy{MaxAttempts: 1}}
	if _, err := e.PutType(ctx, good); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	runWorker(t, e, WorkerConfig{Types: []string{"bad.local"}, Concurrency: 1, Handle: func(_ context.Context, tk *store.Task) error {
		if string(tk.Payload) == "1" {
			return nil // the worker is running
		}
		calls.Add(1)
		return errors.New("boom")
	}})
	first := mustEnqueue(t, e, "bad.local", "1")
	waitTask(t, e, first, "the first task done", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	// A change through this node drops the cached configuration; a node of
	// a newer version then stores one this binary cannot decode, before
	// this node read the type again.
	if _, err := e.PutType(ctx, good); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	id := putUnreadableTask(t, st, "bad.local", nil)
	e.wake.broadcast()
	checkHeldBack(t, st, id, start)
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times; want 0 (its timeout and policy are unknown)", n)
	}
}

func TestPushOfAnUnreadableTypeIsHeldBack(t *testing.T) {
	backendtest.Run(t, testPushOfAnUnreadableTypeIsHeldBack)
}

func testPushOfAnUnreadableTypeIsHeldBack(t *testing.T, backend string) {
	var h hits
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	st := openWorkerStoreOn(t, backend)
	start := time.Now()
	id := putUnreadableTask(t, st, "bad.push", []byte(`{"url":"`+srv.URL+`/hook"}`))
	startWorkerEngine(t, st, Config{NoScheduler: true, DefaultPolicy: hourDefaults()})
	checkHeldBack(t, st, id, start)
	if n := len(h.get()); n != 0 {
		t.Fatalf("target got %d requests; want 0", n)
	}
}

func TestPullFailureOfAnUnreadableTypeIsHeldBack(t *testing.T) {
	backendtest.Run(t, testPullFailureOfAnUnreadableTypeIsHeldBack)
}

func testPullFailureOfAnUnreadableTypeIsHeldBack(t *testing.T, backend string) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, backend)
	start := time.Now()
	id := putUnreadableTask(t, st, "bad.pull", nil)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, DefaultPolicy: hourDefaults()})
	// Leased through another node, which could read the configuration.
	ts, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"bad.pull"}, Limit: 1, WorkerID: "py", LeaseDuration: time.Minute, Now: e.now()})
	if err != nil || len(ts) != 1 {
		t.Fatalf("fetch: %d tasks, %v", len(ts), err)
	}
	out, err := e.Fail(ctx, id, LeaseToken(&ts[0]), ReportedError{Code: "E_BAD", Message: "bad input"})
	if err != nil {
		t.Fatalf("Fail: %v; want the task held back", err)
	}
	if out.State != store.StateRetryWaiting || out.RunAt.Before(start.Add(unreadableTypeDelay)) {
		t.Fatalf("Fail = %s at %v; want retry_waiting after %v", out.State, out.RunAt, unreadableTypeDelay)
	}
	checkHeldBack(t, st, id, start)
}
