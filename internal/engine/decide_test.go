package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

func TestTruncateKeepsCharacters(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},   // é is 2 bytes: not cut in half
		{"a✓b", 3, "a"},  // ✓ is 3 bytes
		{"a✓b", 4, "a✓"}, // fits whole
		{"✓✓", 1, ""},    // nothing whole fits
		{strings.Repeat("é", 3000), maxMessageLen, strings.Repeat("é", maxMessageLen/2)},
	} {
		got := truncate(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) || len(got) > c.n {
			t.Errorf("truncate(%.20q, %d) = %.20q (%d bytes), want %.20q", c.in, c.n, got, len(got), c.want)
		}
	}
}

// nilDerefError's methods read the receiver: a nil *nilDerefError is a
// non-nil error whose Error and Unwrap panic.
type nilDerefError struct{ cause error }

// errorOnlyPanics is an error whose Error method panics; it has no Unwrap.
type errorOnlyPanics struct{ p *string }

func (e errorOnlyPanics) Error() string { return *e.p }

func (e *nilDerefError) Error() string { return e.cause.Error() }
func (e *nilDerefError) Unwrap() error { return e.cause }

// TestDecideTreatsAPanickingErrorAsAPanic: Decide must not panic on a
// failure whose error value panics when asked for its message or unwrapped
// (it runs outside any handler's recovery, so the panic would end the
// process); the attempt fails as a handler panic, code "panic", class
// unknown, retried by the policy.
func TestDecideTreatsAPanickingErrorAsAPanic(t *testing.T) {
	e, spec, now, task := decideSetup(t)
	var bad *nilDerefError
	for _, f := range []Failure{{Err: bad}, {Err: fmt.Errorf("wrapped: %w", bad)}, {Err: retry.Permanent(bad)}} {
		out := e.Decide(task, &spec, f, now)
		if out.State != store.StateRetryWaiting || out.Error == nil || out.Error.Code != "panic" ||
			out.Error.Class != "unknown" || !strings.Contains(out.Detail, "goroutine") {
			t.Errorf("Decide(%T) = state %s error %+v detail %.40q, want retry_waiting, code panic, class unknown, a stack",
				f.Err, out.State, out.Error, out.Detail)
		}
	}
	if out := e.Decide(task, &spec, Failure{Err: errors.New("fine")}, now); out.Error == nil || out.Error.Code == "panic" || out.Error.Message != "fine" {
		t.Errorf("Decide(a plain error) = %+v, want its message and no panic", out.Error)
	}
	// An error whose Error method alone panics.
	if out := e.Decide(task, &spec, Failure{Err: errorOnlyPanics{}}, now); out.Error == nil || out.Error.Code != "panic" {
		t.Errorf("Decide(an error whose Error panics) = %+v, want code panic", out.Error)
	}
}

type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// TestDecideClassifiesTheTimeoutCauseAsADeadline: the per-attempt
// timeout's cause, returned by a handler as context.Cause(ctx), is
// classified like ctx.Err() (transient, deadline_exceeded); a typed error
// around it still wins.
func TestDecideClassifiesTheTimeoutCauseAsADeadline(t *testing.T) {
	e, spec, now, task := decideSetup(t)
	out := e.Decide(task, &spec, Failure{Err: fmt.Errorf("call: %w", ErrAttemptTimeout)}, now)
	if out.State != store.StateRetryWaiting || out.Error.Code != retry.CodeDeadlineExceeded || out.Error.Class != "transient" ||
		out.Error.Message != "call: attempt timed out" {
		t.Errorf("timeout cause: state %s error %+v, want retry_waiting, deadline_exceeded, transient, the handler's message", out.State, out.Error)
	}
	out = e.Decide(task, &spec, Failure{Err: retry.Permanent(ErrAttemptTimeout)}, now)
	if out.State != store.StateDead || out.DeadReason != store.DeadNonRetryable {
		t.Errorf("Permanent(timeout cause): state %s reason %q, want dead non_retryable", out.State, out.DeadReason)
	}
}

// TestReportedStatusClassifiedAsInProcess: a pull worker's reported HTTP
// status is classified as the same response is in process and for push
// deliveries (retry.HTTPError), whether or not a Retry-After came with it:
// a 404 with Retry-After is permanent everywhere. A report whose code is
// not a status is transient when it asks for a delay. Before, any report
// with retry_after_seconds was transient, so a pull worker's 404 was
// retried where an in-process handler's went to the DLQ.
func TestReportedStatusClassifiedAsInProcess(t *testing.T) {
	for _, c := range []struct {
		code string
		ra   time.Duration
	}{
		{"400", 30 * time.Second}, {"404", time.Second}, {"501", time.Second}, {"422", 0},
		{"429", 30 * time.Second}, {"503", 0}, {"503", time.Second}, {"408", 0},
	} {
		n, _ := strconv.Atoi(c.code)
		want := (&retry.HTTPError{StatusCode: n, RetryAfter: c.ra}).Class()
		if got := (ReportedError{Code: c.code, Message: "m", RetryAfter: c.ra}).failure(); got.Class != want || got.RetryAfter != c.ra {
			t.Errorf("reported %s with Retry-After %v: class %v, retry after %v; in process %v", c.code, c.ra, got.Class, got.RetryAfter, want)
		}
	}
	if got := (ReportedError{Code: "quota", Message: "m", RetryAfter: time.Second}).failure(); got.Class != retry.ClassTransient {
		t.Errorf("reported non-status code with Retry-After: class %v, want transient", got.Class)
	}
	if got := (ReportedError{Code: "quota", Message: "m"}).failure(); got.Class != retry.ClassUnknown {
		t.Errorf("reported non-status code: class %v, want unknown", got.Class)
	}
}

// TestDecideCutsLongErrorCodes: a recorded error code is at most
// MaxErrorCodeLen bytes (cut on a character boundary), the longest code a
// dead-letter filter takes, so that every group the DLQ summary shows can
// be listed, redriven and purged by its code. The policy's lists still
// match the whole code.
func TestDecideCutsLongErrorCodes(t *testing.T) {
	e, spec, now, task := decideSetup(t)
	long := strings.Repeat("é", MaxErrorCodeLen) // 2 bytes each
	spec.Policy.NoRetryOn = []string{long}
	out := e.Decide(task, &spec, ReportedError{Code: long, Message: "m"}.failure(), now)
	if c := out.Error.Code; len(c) > MaxErrorCodeLen || !utf8.ValidString(c) || !strings.HasPrefix(long, c) || len(c) < MaxErrorCodeLen-1 {
		t.Errorf("recorded code of %d bytes: %d bytes, valid %v", len(long), len(c), utf8.ValidString(c))
	}
	if out.State != store.StateDead || out.DeadReason != store.DeadNonRetryable {
		t.Errorf("code in no_retry_on: state %s reason %q, want dead non_retryable (lists match the whole code)", out.State, out.DeadReason)
	}
}

// decideSetup returns an engine with a fixed jitter draw, the default
// configuration of type "t", a fixed now and a running task of "t" on its
// first attempt, for calling Decide.
func decideSetup(t *testing.T) (*Engine, TypeSpec, time.Time, *store.Task) {
	t.Helper()
	e, err := New(Config{Store: openWorkerStoreOn(t, "sqlite"), Rand: fixedRand(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	return e, e.defaultSpec("t"), time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), &store.Task{ID: "a", Type: "t", Attempt: 1, LeaseID: "l"}
}

// TestDecideAppliesCodeListsToAPanickingError: an error whose methods
// panic is decided as the handler's panic it is, code "panic", under the
// type's code lists like a panic in the handler itself: no_retry_on
// ["panic"] sends both to the DLQ, and a retry_on list without "panic"
// makes both permanent. Before, only the handler's own panic went
// through the lists; the panicking error was always retried.
func TestDecideAppliesCodeListsToAPanickingError(t *testing.T) {
	e, spec, now, task := decideSetup(t)
	var bad *nilDerefError
	handlerPanic := panicFailure(&PanicError{Value: "boom", Stack: "goroutine 1"})
	for _, lists := range []struct {
		name          string
		retryOn, deny []string
	}{{"no_retry_on panic", nil, []string{"panic"}}, {"retry_on 503", []string{"503"}, nil}} {
		spec.Policy.RetryOn, spec.Policy.NoRetryOn = lists.retryOn, lists.deny
		want := e.Decide(task, &spec, handlerPanic, now)
		if want.State != store.StateDead || want.DeadReason != store.DeadNonRetryable {
			t.Fatalf("%s: handler panic: state %s reason %q, want dead non_retryable", lists.name, want.State, want.DeadReason)
		}
		out := e.Decide(task, &spec, Failure{Err: bad}, now)
		if out.State != want.State || out.DeadReason != want.DeadReason || out.Error.Code != "panic" || out.Error.Class != want.Error.Class {
			t.Errorf("%s: panicking error: state %s reason %q error %+v; a handler panic: state %s reason %q class %s",
				lists.name, out.State, out.DeadReason, out.Error, want.State, want.DeadReason, want.Error.Class)
		}
	}
}
