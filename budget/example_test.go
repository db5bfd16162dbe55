package budget_test

import (
	"fmt"
	"time"

	"github.com/retryq/retryq/budget"
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
