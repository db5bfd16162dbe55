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
