package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

// When ctx ends during the wait, Do stops with StopCanceled, and the last
// entry of ExhaustedError.Attempts says so (Delay 0), as AttemptInfo
// documents; it used to say that retrying went on.
func TestDoCanceledDuringWaitHistory(t *testing.T) {
	clock := retrytest.NewClock(time.Unix(1e9, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Hour, Jitter: retry.JitterNone, MaxAttempts: 5}
	done := make(chan error, 1)
	go func() {
		done <- retry.Do(ctx, func(context.Context) error { return errors.New("boom") }, p, retry.WithClock(clock))
	}()
	if err := clock.BlockUntil(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-done
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Stop != retry.StopCanceled || len(ex.Attempts) != 1 {
		t.Fatalf("err %v", err)
	}
	if last := ex.Attempts[0]; last.Stop != retry.StopCanceled || last.Delay != 0 {
		t.Fatalf("last attempt %+v: Do stopped (%s) but the history says it goes on", last, ex.Stop)
	}
}

// When ctx ends while Do is about to wait, and the wait's timer is also
// due, Do must stop rather than start another attempt with an ended
// context: "waits end early when ctx ends". Here a hook cancels ctx after
// the first failure and the auto clock makes the timer due at once, so the
// wait's select sees both; it used to pick the timer about half the time.
func TestDoNoAttemptAfterContextEndsWhileTimerIsDue(t *testing.T) {
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Second, Jitter: retry.JitterNone, MaxAttempts: 5}
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		calls, afterEnd := 0, 0
		op := func(ctx context.Context) error {
			calls++
			if ctx.Err() != nil {
				afterEnd++
			}
			return errors.New("boom")
		}
		err := retry.Do(ctx, op, p, retry.WithClock(retrytest.NewAutoClock(time.Unix(1e9, 0))),
			retry.WithHook(func(retry.AttemptInfo) { cancel() }))
		cancel()
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Stop != retry.StopCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: err %v, want an ExhaustedError stopped by the cancel", i, err)
		}
		if calls != 1 || afterEnd != 0 || len(ex.Attempts) != 1 {
			t.Fatalf("run %d: %d attempts, %d of them after ctx ended; want 1 and 0", i, calls, afterEnd)
		}
	}
}
