package retryq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

func TestFailsTwiceThenSucceeds(t *testing.T) { backendtest.Run(t, testFailsTwiceThenSucceeds) }

func testFailsTwiceThenSucceeds(t *testing.T, backend string) {
	p := fastPolicy(5)
	p.RetryOn = []string{"ETIMEDOUT"} // the allow list makes the code transient
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: p})
	var calls atomic.Int32
	e.mux.HandleFunc("flaky", func(ctx context.Context, task *retryq.Task) error {
		if n := calls.Add(1); n <= 2 {
			return retryq.WithCode("ETIMEDOUT", errors.New("downstream timed out"))
		}
		return nil
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	res, err := e.client.Enqueue(context.Background(), "flaky", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateSucceeded, store.StateDead)
	if ti.State != store.StateSucceeded || ti.Attempt != 3 || calls.Load() != 3 {
		t.Fatalf("state %s attempt %d calls %d, want succeeded after 3", ti.State, ti.Attempt, calls.Load())
	}
	hist, err := e.client.Attempts(context.Background(), res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 {
		t.Fatalf("history has %d attempts, want 3", len(hist))
	}
	for i, a := range hist[:2] {
		if a.Number != i+1 || a.Outcome != store.OutcomeFailed || a.Error == nil || a.Error.Code != "ETIMEDOUT" || a.Error.Class != "transient" {
			t.Fatalf("attempt %d = %+v (error %+v)", i+1, a, a.Error)
		}
		if a.Delay <= 0 {
			t.Fatalf("attempt %d recorded no delay", i+1)
		}
	}
	if hist[2].Outcome != store.OutcomeSucceeded || hist[2].Number != 3 {
		t.Fatalf("last attempt = %+v", hist[2])
	}
}

func TestPermanentErrorGoesStraightToDLQ(t *testing.T) {
	backendtest.Run(t, testPermanentErrorGoesStraightToDLQ)
}

func testPermanentErrorGoesStraightToDLQ(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(5)})
	var calls atomic.Int32
	e.mux.HandleFunc("bad", func(ctx context.Context, task *retryq.Task) error {
		calls.Add(1)
		return retryq.Permanent(retryq.WithCode("invalid_format", errors.New("payload is not a PDF")))
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(context.Background(), "bad", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 1 || calls.Load() != 1 || ti.DeadReason != store.DeadNonRetryable {
		t.Fatalf("attempt %d calls %d reason %q, want 1, 1, non_retryable", ti.Attempt, calls.Load(), ti.DeadReason)
	}
	if ti.LastError == nil || ti.LastError.Code != "invalid_format" || ti.LastError.Class != "permanent" {
		t.Fatalf("last error %+v", ti.LastError)
	}
	if string(ti.Payload) != "null" {
		t.Fatalf("payload lost: %s", ti.Payload)
	}
}

func TestAlwaysFailingExhaustsMaxAttempts(t *testing.T) {
	backendtest.Run(t, testAlwaysFailingExhaustsMaxAttempts)
}

func testAlwaysFailingExhaustsMaxAttempts(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(4)})
	var calls atomic.Int32
	e.mux.HandleFunc("down", func(ctx context.Context, task *retryq.Task) error {
		calls.Add(1)
		return errors.New("503 from upstream")
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(context.Background(), "down", map[string]string{"doc": "x"})
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 4 || calls.Load() != 4 || ti.DeadReason != store.DeadMaxAttempts {
		t.Fatalf("attempt %d calls %d reason %q, want 4, 4, max_attempts", ti.Attempt, calls.Load(), ti.DeadReason)
	}
	if ti.LastError == nil || ti.LastError.Class != "unknown" {
		t.Fatalf("an unclassified error must be recorded as unknown, got %+v", ti.LastError)
	}
	// A per-task override of max attempts wins over the policy.
	res2, err := e.client.Enqueue(context.Background(), "down", nil, retryq.WithMaxAttempts(2))
	if err != nil {
		t.Fatal(err)
	}
	ti = e.waitState(res2.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 2 {
		t.Fatalf("override: %d attempts, want 2", ti.Attempt)
	}
}

func TestRetryWindowEndsRetrying(t *testing.T) { backendtest.Run(t, testRetryWindowEndsRetrying) }

func testRetryWindowEndsRetrying(t *testing.T, backend string) {
	p := fastPolicy(1000)
	p.InitialDelay = 40 * time.Millisecond
	p.RetryWindow = 300 * time.Millisecond
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: p})
	var calls atomic.Int32
	e.mux.HandleFunc("slowdown", func(ctx context.Context, task *retryq.Task) error {
		calls.Add(1)
		return retryq.Transient(errors.New("still down"))
	})
	e.startWorker(retryq.WorkerConfig{})
	start := time.Now()
	res, err := e.client.Enqueue(context.Background(), "slowdown", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.DeadReason != store.DeadRetryWindow {
		t.Fatalf("reason %q, want retry_window", ti.DeadReason)
	}
	// Attempts happen at ~0, 40, 80, ... ms; the window of 300 ms admits at most 8 retries.
	if n := calls.Load(); n < 2 || n > 9 {
		t.Fatalf("%d attempts inside a 300ms window with 40ms delays", n)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("dead after %s, before the window could have been used", time.Since(start))
	}
}

func TestRetryAfterIsRespected(t *testing.T) { backendtest.Run(t, testRetryAfterIsRespected) }

func testRetryAfterIsRespected(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	var mu sync.Mutex
	var starts []time.Time
	e.mux.HandleFunc("ratelimited", func(ctx context.Context, task *retryq.Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		n := len(starts)
		mu.Unlock()
		if n == 1 {
			return retryq.RetryAfter(errors.New("429 too many requests"), 400*time.Millisecond)
		}
		return nil
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(context.Background(), "ratelimited", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(res.Task.ID, 10*time.Second, store.StateSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 {
		t.Fatalf("%d attempts, want 2", len(starts))
	}
	if gap := starts[1].Sub(starts[0]); gap < 400*time.Millisecond {
		t.Fatalf("second attempt %s after the first; Retry-After asked for 400ms", gap)
	}
	hist, _ := e.client.Attempts(context.Background(), res.Task.ID)
	if hist[0].Delay != 400*time.Millisecond {
		t.Fatalf("recorded delay %s, want 400ms", hist[0].Delay)
	}
}

func TestPanicIsRecordedWithStack(t *testing.T) { backendtest.Run(t, testPanicIsRecordedWithStack) }

func testPanicIsRecordedWithStack(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(2)})
	e.mux.HandleFunc("boom", func(ctx context.Context, task *retryq.Task) error {
		m := nilMap()
		m["x"] = 1 // the handler panics on purpose: a nil map write, a runtime error
		return nil
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(context.Background(), "boom", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 2 || ti.LastError.Code != "panic" {
		t.Fatalf("attempt %d error %+v", ti.Attempt, ti.LastError)
	}
	hist, _ := e.client.Attempts(context.Background(), res.Task.ID)
	if len(hist) != 2 || hist[0].Detail == "" || !strings.Contains(hist[0].Detail, "goroutine") {
		t.Fatalf("history lacks the stack: %+v", hist)
	}
}

func TestAttemptTimeoutCancelsHandler(t *testing.T) {
	backendtest.Run(t, testAttemptTimeoutCancelsHandler)
}

func testAttemptTimeoutCancelsHandler(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(2)})
	if err := e.client.SetType(context.Background(), retryq.TypeConfig{Type: "hang", Policy: fastPolicy(2), Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.mux.HandleFunc("hang", func(ctx context.Context, task *retryq.Task) error {
		<-ctx.Done()
		return ctx.Err()
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(context.Background(), "hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 2 || ti.DeadReason != store.DeadMaxAttempts || ti.LastError.Class != "transient" {
		t.Fatalf("attempt %d reason %s error %+v", ti.Attempt, ti.DeadReason, ti.LastError)
	}
}

// nilMap returns a nil map, for a handler that panics with a runtime error.
func nilMap() map[string]int { return nil }

// msgOnlyError and unwrappingError are error types whose methods read their
// receiver: a nil *msgOnlyError or *unwrappingError returned as an error is
// not a nil error (the classic typed-nil mistake), and calling its Error or
// Unwrap method panics.
type msgOnlyError struct{ msg string }

func (e *msgOnlyError) Error() string { return e.msg }

type unwrappingError struct {
	msg   string
	cause error
}

func (e *unwrappingError) Error() string { return e.msg }
func (e *unwrappingError) Unwrap() error { return e.cause }

// TestHandlerErrorWhoseMethodsPanicIsAHandlerPanic: a handler that returns
// an error value whose Error or Unwrap method panics (a typed nil pointer)
// fails its attempt like a handler panic (code "panic", class unknown, the
// stack in the history) and is retried by the policy; the process running
// the worker must not crash.
func TestHandlerErrorWhoseMethodsPanicIsAHandlerPanic(t *testing.T) {
	backendtest.Run(t, testHandlerErrorWhoseMethodsPanicIsAHandlerPanic)
}

func testHandlerErrorWhoseMethodsPanicIsAHandlerPanic(t *testing.T, backend string) {
	ctx := context.Background()
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(2)})
	e.mux.HandleFunc("nil.msg", func(ctx context.Context, task *retryq.Task) error {
		var err *msgOnlyError
		return err
	})
	e.mux.HandleFunc("nil.unwrap", func(ctx context.Context, task *retryq.Task) error {
		var err *unwrappingError
		return err
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	for _, typ := range []string{"nil.msg", "nil.unwrap"} {
		res, err := e.client.Enqueue(ctx, typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
		if ti.Attempt != 2 || ti.DeadReason != store.DeadMaxAttempts || ti.LastError == nil ||
			ti.LastError.Code != "panic" || ti.LastError.Class != "unknown" {
			t.Fatalf("%s: attempt %d reason %q error %+v, want 2 attempts, max_attempts, code panic, class unknown",
				typ, ti.Attempt, ti.DeadReason, ti.LastError)
		}
		hist, err := e.client.Attempts(ctx, res.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 2 || !strings.Contains(hist[0].Detail, "goroutine") || hist[0].Delay <= 0 {
			t.Fatalf("%s: history %+v, want 2 attempts, the first with a stack and a delay", typ, hist)
		}
	}
}

// TestAttemptTimeoutReturnedAsCauseIsADeadline: a handler stopped by its
// type's per-attempt timeout that returns context.Cause(ctx) rather than
// ctx.Err() has timed out all the same: the attempt is class transient
// with code deadline_exceeded, so an allow list naming that code retries
// it, instead of an unknown error without a code that the allow list sends
// straight to the dead-letter queue as non_retryable.
func TestAttemptTimeoutReturnedAsCauseIsADeadline(t *testing.T) {
	ctx := context.Background()
	p := fastPolicy(2)
	p.RetryOn = []string{"deadline_exceeded"}
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: p})
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hang", Policy: p, Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.mux.HandleFunc("hang", func(ctx context.Context, task *retryq.Task) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(ctx, "hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	if ti.Attempt != 2 || ti.DeadReason != store.DeadMaxAttempts || ti.LastError == nil ||
		ti.LastError.Code != "deadline_exceeded" || ti.LastError.Class != "transient" {
		t.Fatalf("attempt %d reason %q error %+v, want 2 attempts, max_attempts, deadline_exceeded, transient", ti.Attempt, ti.DeadReason, ti.LastError)
	}
}
