package retrytest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestClockAdvanceFiresDueTimers(t *testing.T) {
	c := retrytest.NewClock(start)
	a, b := c.NewTimer(time.Second), c.NewTimer(2*time.Second)
	if c.Waiters() != 2 {
		t.Fatal("timers not pending")
	}
	c.Advance(time.Second)
	select {
	case at := <-a.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("due timer did not fire")
	}
	select {
	case <-b.C():
		t.Fatal("timer fired early")
	default:
	}
	if !b.Stop() || b.Stop() || c.Waiters() != 0 {
		t.Fatal("Stop")
	}
	if z := c.NewTimer(0); len(z.C()) != 1 {
		t.Fatal("zero timer should fire at once")
	}
}

func TestClockBlockUntil(t *testing.T) {
	c := retrytest.NewClock(start)
	go c.NewTimer(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := c.BlockUntil(short, 2); err == nil {
		t.Fatal("BlockUntil ignored its context")
	}
}

func TestAutoClock(t *testing.T) {
	c := retrytest.NewAutoClock(start)
	tm := c.NewTimer(3 * time.Second)
	if at := <-tm.C(); !at.Equal(start.Add(3*time.Second)) || !c.Now().Equal(at) {
		t.Fatalf("auto clock at %v", c.Now())
	}
}

func ExampleNewAutoClock() {
	clock := retrytest.NewAutoClock(start)
	calls := 0
	op := func(context.Context) error {
		calls++
		return fmt.Errorf("attempt %d failed", calls)
	}
	p := retry.Policy{MaxAttempts: 4, Jitter: retry.JitterNone}
	err := retry.Do(context.Background(), op, p, retry.WithClock(clock))
	fmt.Println(err)
	fmt.Println("waited", clock.Now().Sub(start)) // 1s + 2s + 4s, without sleeping
	// Output:
	// retry: gave up after 4 attempts (max_attempts): attempt 4 failed
	// waited 7s
}

// With a manual clock the test decides when time moves: BlockUntil waits
// until the retry loop is waiting, and Advance lets it go on.
func ExampleNewClock() {
	clock := retrytest.NewClock(start)
	attempts := make(chan int, 3)
	n := 0 // only Do's goroutine calls op
	op := func(context.Context) error {
		n++
		attempts <- n
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	done := make(chan error)
	go func() {
		p := retry.Policy{InitialDelay: time.Minute, Jitter: retry.JitterNone}
		done <- retry.Do(context.Background(), op, p, retry.WithClock(clock))
	}()

	ctx := context.Background()
	for range 2 {
		_ = clock.BlockUntil(ctx, 1) // Do waits for its backoff
		fmt.Println("attempt", <-attempts, "failed; waiting timers:", clock.Waiters())
		clock.Advance(10 * time.Minute)
	}
	fmt.Println("attempt", <-attempts, "err:", <-done, "after", clock.Now().Sub(start))
	// Output:
	// attempt 1 failed; waiting timers: 1
	// attempt 2 failed; waiting timers: 1
	// attempt 3 err: <nil> after 20m0s
}
