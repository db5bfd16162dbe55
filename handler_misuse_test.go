package retryq_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
)

// TestHandlerGoexitFailsItsAttempt: a handler that calls runtime.Goexit
// (t.FailNow in a test's handler, for one) fails its attempt as a panic
// does, and the worker keeps its handlers. The attempt's lease stayed
// heartbeated for ever (the task "running" until the process ended) and
// the worker lost the handler: with Concurrency 1 it ran nothing more.
func TestHandlerGoexitFailsItsAttempt(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	var calls atomic.Int32
	e.mux.HandleFunc("exits", func(ctx context.Context, task *retryq.Task) error {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		return nil
	})
	e.mux.HandleFunc("after", func(ctx context.Context, task *retryq.Task) error { return nil })
	e.startWorker(retryq.WorkerConfig{Concurrency: 1})
	ctx := context.Background()
	res, err := e.client.Enqueue(ctx, "exits", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateSucceeded, store.StateDead)
	if ti.State != store.StateSucceeded || ti.Attempt != 2 {
		t.Fatalf("task %s after attempt %d, want succeeded at attempt 2", ti.State, ti.Attempt)
	}
	hist, err := e.client.Attempts(ctx, res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Error == nil || hist[0].Error.Code != "panic" ||
		!strings.Contains(hist[0].Error.Message, "runtime.Goexit") || !strings.Contains(hist[0].Detail, "goroutine") {
		t.Fatalf("history %+v (first error %+v), want a first attempt failed with code panic naming runtime.Goexit, with its stack", hist, hist[0].Error)
	}
	// The worker still has its one handler.
	next, err := e.client.Enqueue(ctx, "after", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(next.Task.ID, 10*time.Second, store.StateSucceeded)
}

// TestJoinedPermanentErrorIsPermanent: a Permanent error joined with a
// retryable one (errors.Join, or fmt.Errorf with several %w) dead-letters
// the task at once, whichever comes first: a retry cannot fix the
// permanent part. It was retried when the retryable error came first.
func TestJoinedPermanentErrorIsPermanent(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(5)})
	bad, slow := errors.New("invalid input"), errors.New("slow down")
	handlers := map[string]error{
		"permanent-first": errors.Join(retryq.Permanent(bad), retryq.RetryAfter(slow, time.Millisecond)),
		"retryable-first": errors.Join(retryq.RetryAfter(slow, time.Millisecond), retryq.Permanent(bad)),
		"transient-first": errors.Join(retryq.Transient(slow), retryq.WithCode("bad_input", retryq.Permanent(bad))),
		"wrapped-join":    retryq.WithCode("batch", errors.Join(retryq.Transient(slow), retryq.Permanent(bad))),
	}
	for typ, err := range handlers {
		e.mux.HandleFunc(typ, func(context.Context, *retryq.Task) error { return err })
	}
	e.startWorker(retryq.WorkerConfig{})
	for typ := range handlers {
		res, err := e.client.Enqueue(context.Background(), typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
		if ti.Attempt != 1 || ti.DeadReason != store.DeadNonRetryable || ti.LastError == nil || ti.LastError.Class != "permanent" {
			t.Errorf("%s: dead after %d attempts, reason %q, last error %+v; want non_retryable after 1, class permanent",
				typ, ti.Attempt, ti.DeadReason, ti.LastError)
		}
	}
}

// TestCloseFromAHandlerReleasesItsTask pins what Client.Close's doc says of
// a handler that calls it: Close returns once the worker's ShutdownGrace
// and about a second more have passed, with the handler's task released
// (pending, its attempt not counted), and what the handler returns after
// is dropped.
func TestCloseFromAHandlerReleasesItsTask(t *testing.T) {
	st := openStore(t, "")
	t.Cleanup(func() { _ = st.Close() })
	c, err := retryq.NewClient(st, retryq.Options{LeaseDuration: 2 * time.Second, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	closed := make(chan error, 1)
	returned := make(chan struct{})
	mux := retryq.NewMux()
	mux.HandleFunc("closer", func(ctx context.Context, task *retryq.Task) error {
		defer close(returned)
		closed <- c.Close()
		return nil
	})
	const grace = 300 * time.Millisecond
	w, err := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux, Concurrency: 1, ShutdownGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	res, err := c.Enqueue(context.Background(), "closer", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from a handler = %v", err)
		}
		if d := time.Since(start); d < grace {
			t.Errorf("Close from a handler returned after %s, before the grace (%s) ran out", d, grace)
		}
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Close from a handler did not return")
	}
	<-returned
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v, want nil once the client closed", err)
	}
	ti, err := st.GetTask(context.Background(), res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ti.State != store.StatePending || ti.Attempt != 0 {
		t.Fatalf("task %s at attempt %d after Close from its handler, want pending, its attempt not counted", ti.State, ti.Attempt)
	}
}
