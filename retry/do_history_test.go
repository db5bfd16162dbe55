package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

// Do used to keep every failed attempt (and its error) until it returned:
// a long retry loop (a huge attempt limit with a short delay, bounded by a
// retry window or by ctx) grew its memory without bound. The history now
// keeps the first attempt and the latest ones, at most retry.MaxHistory,
// and counts the others; hooks still see every attempt.
func TestDoHistoryIsBounded(t *testing.T) {
	const failures = 3*retry.MaxHistory + 7
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond, Jitter: retry.JitterNone,
		MaxAttempts: failures}
	hooked := 0
	err := retry.Do(context.Background(), func(context.Context) error { return errBoom }, p,
		retry.WithClock(retrytest.NewAutoClock(start)), retry.WithHook(func(retry.AttemptInfo) { hooked++ }))
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Stop != retry.StopMaxAttempts {
		t.Fatalf("err = %v", err)
	}
	if hooked != failures {
		t.Fatalf("hooks saw %d attempts, want %d", hooked, failures)
	}
	if len(ex.Attempts) != retry.MaxHistory || ex.Omitted != failures-retry.MaxHistory {
		t.Fatalf("history of %d attempts, %d omitted; want %d and %d", len(ex.Attempts), ex.Omitted,
			retry.MaxHistory, failures-retry.MaxHistory)
	}
	if ex.Attempts[0].Number != 1 {
		t.Fatalf("first kept attempt is %d, want 1", ex.Attempts[0].Number)
	}
	for i, a := range ex.Attempts[1:] {
		if want := failures - retry.MaxHistory + 2 + i; a.Number != want {
			t.Fatalf("kept attempt %d is number %d, want %d", i+1, a.Number, want)
		}
	}
	if last := ex.Attempts[len(ex.Attempts)-1]; last.Number != failures || last.Stop != retry.StopMaxAttempts {
		t.Fatalf("last attempt %+v", last)
	}
	if want := fmt.Sprintf("retry: gave up after %d attempts (max_attempts): boom", failures); err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}

// A short history is kept whole, with nothing omitted.
func TestDoHistoryKeptWholeUpToMaxHistory(t *testing.T) {
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond, Jitter: retry.JitterNone,
		MaxAttempts: retry.MaxHistory, RetryWindow: math.MaxInt64}
	err := retry.Do(context.Background(), func(context.Context) error { return errBoom }, p,
		retry.WithClock(retrytest.NewAutoClock(start)))
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || len(ex.Attempts) != retry.MaxHistory || ex.Omitted != 0 {
		t.Fatalf("err = %v", err)
	}
	for i, a := range ex.Attempts {
		if a.Number != i+1 {
			t.Fatalf("attempt %d numbered %d", i+1, a.Number)
		}
	}
}

// A nil clock or hook given as an option used to make Do panic after the
// first failure (the op had already run); a nil clock means the system
// clock, as with no option, and a nil hook is skipped.
func TestDoNilOptions(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Do panicked: %v", r)
		}
	}()
	op, calls := failing(2, errBoom)
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Nanosecond, Jitter: retry.JitterNone}
	if err := retry.Do(context.Background(), op, p, retry.WithClock(nil), retry.WithHook(nil)); err != nil || *calls != 3 {
		t.Fatalf("err=%v calls=%d", err, *calls)
	}
}
