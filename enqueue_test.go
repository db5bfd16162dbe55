package retryq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestEnqueueRefusesInvalidOptionsNamingTheField: every invalid enqueue
// argument is an ErrInvalid whose message says the enqueue failed and names
// the argument as the Go API does (WithDelay, not the HTTP API's
// delay_seconds), in Enqueue and in EnqueueMany (with the task's index),
// and nothing is stored.
func TestEnqueueRefusesInvalidOptionsNamingTheField(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	ctx := context.Background()
	cases := []struct {
		name, field string
		typ         string
		payload     any
		opts        []retryq.EnqueueOption
	}{
		{"run time after year 9999", "WithRunAt", "a", nil,
			[]retryq.EnqueueOption{retryq.WithRunAt(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}},
		{"run time before year 1", "WithRunAt", "a", nil,
			[]retryq.EnqueueOption{retryq.WithRunAt(time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC))}},
		{"priority out of range", "WithPriority", "a", nil, []retryq.EnqueueOption{retryq.WithPriority(2_000_000)}},
		{"negative max attempts", "WithMaxAttempts", "a", nil, []retryq.EnqueueOption{retryq.WithMaxAttempts(-1)}},
		{"long idempotency key", "WithIdempotencyKey", "a", nil,
			[]retryq.EnqueueOption{retryq.WithIdempotencyKey(strings.Repeat("k", 256))}},
		{"NUL in idempotency key", "WithIdempotencyKey", "a", nil, []retryq.EnqueueOption{retryq.WithIdempotencyKey("a\x00b")}},
		{"negative delay", "WithDelay", "a", nil, []retryq.EnqueueOption{retryq.WithDelay(-time.Second)}},
		{"bytes that are not JSON", "payload", "a", []byte("{"), nil},
		{"JSON that is not UTF-8", "payload", "a", json.RawMessage("{\"k\":\"\xff\"}"), nil},
		{"payload over MaxPayloadBytes", "payload", "a", json.RawMessage(`"` + strings.Repeat("x", retryq.MaxPayloadBytes-1) + `"`), nil},
		{"value JSON cannot encode", "payload", "a", map[string]any{"c": make(chan int)}, nil},
		{"type with a space", "type", "a b", nil, nil},
		{"empty type", "type", "", nil, nil},
	}
	for _, tc := range cases {
		_, err := e.client.Enqueue(ctx, tc.typ, tc.payload, tc.opts...)
		if !errors.Is(err, retryq.ErrInvalid) || !strings.HasPrefix(err.Error(), "enqueue task: "+tc.field+": ") {
			t.Errorf("Enqueue with %s = %v, want ErrInvalid saying \"enqueue task: %s: \"", tc.name, err, tc.field)
		}
		_, err = e.client.EnqueueMany(ctx, []retryq.NewTask{{Type: "ok"}, {Type: tc.typ, Payload: tc.payload, Options: tc.opts}})
		if !errors.Is(err, retryq.ErrInvalid) || !strings.HasPrefix(err.Error(), "enqueue tasks: tasks[1]") || !strings.Contains(err.Error(), tc.field+": ") {
			t.Errorf("EnqueueMany with %s = %v, want ErrInvalid saying \"enqueue tasks: tasks[1]\" and naming %s", tc.name, err, tc.field)
		}
	}
	tasks, _, err := e.client.List(ctx, retryq.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 0 {
		t.Fatalf("%d tasks stored by refused enqueues", len(tasks))
	}
	// A run time in the past is due at once.
	res, err := e.client.Enqueue(ctx, "a", nil, retryq.WithRunAt(time.Now().Add(-time.Hour)))
	if err != nil || res.Task.State != store.StatePending {
		t.Fatalf("Enqueue due an hour ago = %+v, %v; want a pending task", res.Task, err)
	}
}

// TestEnqueuedBytesAreCopied: Enqueue keeps no reference to a payload given
// as bytes. A caller may reuse its buffer once Enqueue returned, even when
// the task went straight from the insert to an idle local handler that has
// not read it yet.
func TestEnqueuedBytesAreCopied(t *testing.T) { backendtest.Run(t, testEnqueuedBytesAreCopied) }

func testEnqueuedBytesAreCopied(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{})
	proceed := make(chan struct{})
	got := make(chan string, 2)
	e.mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error {
		<-proceed
		got <- string(task.Payload)
		return nil
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	// Direct dispatch needs the worker idle: its first fetch came back.
	waitFor(t, 10*time.Second, "the worker's first fetch", func() bool { return e.client.Counters().Fetches > 0 })
	raw := []byte(`{"n":1}`)
	msg := json.RawMessage(`{"m":1}`)
	if _, err := e.client.Enqueue(context.Background(), "a", raw); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(context.Background(), "a", msg); err != nil {
		t.Fatal(err)
	}
	copy(raw, `{"n":2}`)
	copy(msg, `{"m":2}`)
	close(proceed)
	seen := map[string]bool{}
	for range 2 {
		select {
		case p := <-got:
			seen[p] = true
		case <-time.After(10 * time.Second):
			t.Fatal("handlers did not run")
		}
	}
	if !seen[`{"n":1}`] || !seen[`{"m":1}`] {
		t.Fatalf("handlers saw %v, want the payloads as enqueued (dispatched at enqueue: %d)", seen, e.client.Counters().Dispatched)
	}
}

// TestHandlerChangingItsTaskChangesNothingElse: a handler's Task is its own:
// writing into its payload changes neither the enqueue's result (the task
// was handed to the handler straight from the insert) nor the next
// attempt's payload.
func TestHandlerChangingItsTaskChangesNothingElse(t *testing.T) {
	backendtest.Run(t, testHandlerChangingItsTaskChangesNothingElse)
}

func testHandlerChangingItsTaskChangesNothingElse(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	written := make(chan struct{})
	second := make(chan string, 1)
	e.mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error {
		if task.Attempt > 1 {
			second <- string(task.Payload)
			return nil
		}
		copy(task.Payload, `{"n":9}`)
		close(written)
		return retryq.Transient(errors.New("again"))
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	waitFor(t, 10*time.Second, "the worker's first fetch", func() bool { return e.client.Counters().Fetches > 0 })
	res, err := e.client.Enqueue(context.Background(), "a", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}
	if got := string(res.Task.Payload); got != `{"n":1}` {
		t.Errorf("the enqueue's result shows payload %s after the handler wrote into its own, want {\"n\":1}", got)
	}
	select {
	case p := <-second:
		if p != `{"n":1}` {
			t.Errorf("second attempt's payload = %s, want {\"n\":1}", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no second attempt")
	}
}

// TestZeroEnqueueOptionChangesNothing: an EnqueueOption that no With
// function made (the zero value, in a slice built conditionally) is
// ignored, and the options given with it still apply.
func TestZeroEnqueueOptionChangesNothing(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	var zero retryq.EnqueueOption
	res, err := e.client.Enqueue(context.Background(), "a", nil, zero, retryq.WithPriority(7), zero)
	if err != nil {
		t.Fatalf("Enqueue with zero options: %v", err)
	}
	if res.Task.Priority != 7 {
		t.Errorf("priority = %d, want 7 (the option beside the zero ones)", res.Task.Priority)
	}
}

// TestEnqueueResultIsTheCallersOwn: the task an enqueue returns is the
// caller's: writing into its payload changes nothing a handler sees,
// although the task was handed to an idle worker straight from the insert.
// The result shared its payload with the task handed over, which the
// worker copied for its handler only once a handler took it: the handler
// could see the caller's write (a data race under -race).
func TestEnqueueResultIsTheCallersOwn(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	got := make(chan string, 1)
	e.mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error {
		got <- string(task.Payload)
		return nil
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 1})
	waitFor(t, 10*time.Second, "the worker's first fetch", func() bool { return e.client.Counters().Fetches > 0 })
	res, err := e.client.Enqueue(context.Background(), "a", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(res.Task.Payload, `{"n":2}`)
	select {
	case p := <-got:
		if p != `{"n":1}` {
			t.Errorf("the handler saw payload %s after the caller wrote into the enqueue's result, want {\"n\":1} (dispatched at enqueue: %d)",
				p, e.client.Counters().Dispatched)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}
	if e.client.Counters().Dispatched != 1 {
		t.Fatalf("dispatched at enqueue: %d, want 1 (the case under test)", e.client.Counters().Dispatched)
	}
}
