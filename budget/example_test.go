package budget_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/budget"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

func Example() {
	// At most 20% of first attempts may be retried, with a floor of 0.1
	// retries per second (one per 10s window), and never more than 100 a
	// minute.
	b, err := budget.New(budget.Config{RetriesPerMinute: 100, RetryRatio: 0.2, MinRetriesPerSecond: 0.1, Window: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < 10; i++ {
		b.RecordAttempt(now) // ten first attempts deposit 2 retries
	}
	for i := 0; i < 4; i++ {
		ok, next := b.AllowRetry(now)
		if ok {
			fmt.Println("retry", i, "allowed")
		} else {
			fmt.Println("retry", i, "refused until", next.Sub(now))
		}
	}
	// Output:
	// retry 0 allowed
	// retry 1 allowed
	// retry 2 allowed
	// retry 3 refused until 11s
}

// One budget shared by every retry loop of a service: each loop records
// its first attempt and asks before each retry. A refused retry ends the
// loop at once, with a permanent error, rather than add load to a
// dependency that is failing for everyone.
func Example_withDo() {
	b, err := budget.New(budget.Config{RetryRatio: 0.5}) // no floor: retries only as first attempts earn them
	if err != nil {
		panic(err)
	}
	clock := retrytest.NewAutoClock(time.Unix(1_700_000_000, 0))
	errNoBudget := errors.New("retry budget spent")
	call := func(ctx context.Context) (sent int, err error) {
		op := func(ctx context.Context) error {
			if sent == 0 {
				b.RecordAttempt(clock.Now())
			} else if ok, _ := b.AllowRetry(clock.Now()); !ok {
				return retry.Permanent(errNoBudget)
			}
			sent++
			return errors.New("inventory service unavailable") // it is down
		}
		err = retry.Do(ctx, op, retry.Policy{MaxAttempts: 5}, retry.WithClock(clock))
		return sent, err
	}
	for i := 1; i <= 3; i++ {
		sent, err := call(context.Background())
		fmt.Printf("call %d: sent %d times, budget spent: %v\n", i, sent, errors.Is(err, errNoBudget))
	}
	s := b.Stats(clock.Now())
	fmt.Println("first attempts:", s.FirstAttempts, "retries:", s.Retries)
	// Output:
	// call 1: sent 1 times, budget spent: true
	// call 2: sent 2 times, budget spent: true
	// call 3: sent 1 times, budget spent: true
	// first attempts: 3 retries: 1
}
