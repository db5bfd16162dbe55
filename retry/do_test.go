package retry_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

var (
	start   = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
	fixed1s = retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Second, Jitter: retry.JitterNone}
)

// failing returns an op that fails n times with err, then succeeds, and a
// pointer to the number of calls.
func failing(n int, err error) (func(context.Context) error, *int) {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= n {
			return err
		}
		return nil
	}, &calls
}

func TestDoSucceedsAfterFailures(t *testing.T) {
	clock := retrytest.NewAutoClock(start)
	op, calls := failing(2, errBoom)
	var seen []retry.AttemptInfo
	p := retry.DefaultPolicy()
	p.Jitter = retry.JitterNone
	err := retry.Do(context.Background(), op, p, retry.WithClock(clock),
		retry.WithHook(func(a retry.AttemptInfo) { seen = append(seen, a) }))
	if err != nil || *calls != 3 {
		t.Fatalf("err=%v calls=%d", err, *calls)
	}
	if len(seen) != 2 || seen[0].Number != 1 || seen[0].Delay != time.Second || seen[1].Delay != 2*time.Second ||
		seen[1].Class != retry.ClassUnknown || seen[1].Err != errBoom {
		t.Fatalf("hook saw %+v", seen)
	}
	if got := clock.Now().Sub(start); got != 3*time.Second {
		t.Fatalf("clock moved %v, want 3s", got)
	}
}

func TestDoStops(t *testing.T) {
	tests := []struct {
		name     string
		p        retry.Policy
		err      error
		attempts int
		stop     retry.StopReason
	}{
		{"permanent", fixed1s, retry.Permanent(errBoom), 1, retry.StopNonRetryable},
		{"deny list", retry.Policy{NoRetryOn: []string{"bad"}}, retry.WithCode("bad", errBoom), 1, retry.StopNonRetryable},
		{"max attempts", retry.Policy{MaxAttempts: 4, Backoff: retry.BackoffFixed}, errBoom, 4, retry.StopMaxAttempts},
		{"single attempt", retry.Policy{MaxAttempts: 1}, retry.Transient(errBoom), 1, retry.StopMaxAttempts},
		// Failures at 0s, 1s, 2s; the next would start at 3s > 2.5s.
		{"window", retry.Policy{Backoff: retry.BackoffFixed, Jitter: retry.JitterNone, MaxAttempts: 100, RetryWindow: 2500 * time.Millisecond}, errBoom, 3, retry.StopRetryWindow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, calls := failing(1000, tt.err)
			err := retry.Do(context.Background(), op, tt.p, retry.WithClock(retrytest.NewAutoClock(start)),
				retry.WithRand(rand.New(rand.NewPCG(1, 1))))
			var ex *retry.ExhaustedError
			if !errors.As(err, &ex) {
				t.Fatalf("err = %v", err)
			}
			if *calls != tt.attempts || len(ex.Attempts) != tt.attempts || ex.Stop != tt.stop {
				t.Fatalf("calls=%d history=%d stop=%s; want %d, %s", *calls, len(ex.Attempts), ex.Stop, tt.attempts, tt.stop)
			}
			if last := ex.Attempts[len(ex.Attempts)-1]; last.Stop != tt.stop || last.Delay != 0 {
				t.Fatalf("last attempt %+v", last)
			}
			if !errors.Is(err, errBoom) || !errors.Is(err, tt.err) {
				t.Fatalf("%v does not wrap the cause", err)
			}
		})
	}
}

func TestDoHonorsRetryAfter(t *testing.T) {
	clock := retrytest.NewAutoClock(start)
	op, _ := failing(1, retry.RetryAfter(errBoom, 7*time.Second))
	if err := retry.Do(context.Background(), op, fixed1s, retry.WithClock(clock)); err != nil {
		t.Fatal(err)
	}
	if got := clock.Now().Sub(start); got != 7*time.Second {
		t.Fatalf("waited %v, want 7s", got)
	}
}

func TestDoWaitsOnTheClock(t *testing.T) {
	clock := retrytest.NewClock(start)
	op, calls := failing(1, errBoom)
	done := make(chan error, 1)
	go func() { done <- retry.Do(context.Background(), op, fixed1s, retry.WithClock(clock)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Do returned before the delay passed: %v", err)
	default:
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err != nil || *calls != 2 {
		t.Fatalf("err=%v calls=%d", err, *calls)
	}
}

func TestDoCanceledWhileWaiting(t *testing.T) {
	clock := retrytest.NewClock(start)
	ctx, cancel := context.WithCancel(context.Background())
	op, calls := failing(1000, errBoom)
	done := make(chan error, 1)
	go func() { done <- retry.Do(ctx, op, fixed1s, retry.WithClock(clock)) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := clock.BlockUntil(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-done
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Stop != retry.StopCanceled || *calls != 1 {
		t.Fatalf("err=%v calls=%d", err, *calls)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
		t.Fatalf("%v should wrap both the cause and context.Canceled", err)
	}
	if clock.Waiters() != 0 {
		t.Fatal("timer not stopped")
	}
}

func TestDoCanceledDuringAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	op := func(ctx context.Context) error { cancel(); return ctx.Err() }
	err := retry.Do(ctx, op, fixed1s, retry.WithClock(retrytest.NewAutoClock(start)))
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Stop != retry.StopCanceled || len(ex.Attempts) != 1 {
		t.Fatalf("err = %v", err)
	}
}

func TestDoRefusesBadInput(t *testing.T) {
	op, calls := failing(0, nil)
	if err := retry.Do(context.Background(), op, retry.Policy{MaxAttempts: -1}); !errors.Is(err, retry.ErrInvalidPolicy) {
		t.Fatalf("invalid policy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retry.Do(ctx, op, retry.Policy{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v", err)
	}
	if *calls != 0 {
		t.Fatalf("op ran %d times", *calls)
	}
}
