package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/breaker"
	"github.com/retryq/retryq/retry"
)

func Example() {
	b, err := breaker.New("payments", breaker.Config{
		ConsecutiveFailures: 3,
		CoolDown:            30 * time.Second,
		SuccessesToClose:    1,
		OnStateChange: func(t breaker.Transition) {
			fmt.Printf("%s: %s -> %s (%s)\n", t.Name, t.From, t.To, t.Reason)
		},
	})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		if ok, _ := b.Allow(now); ok {
			b.Failure(now) // the call failed
		}
	}
	ok, retryAt := b.Allow(now)
	fmt.Println("allowed:", ok, "retry at:", retryAt.Sub(now))

	now = retryAt
	if ok, _ := b.Allow(now); ok {
		b.Success(now) // the probe worked
	}
	fmt.Println("state:", b.State(now))
	// Output:
	// payments: closed -> open (consecutive_failures)
	// allowed: false retry at: 30s
	// payments: open -> half_open (cool_down)
	// payments: half_open -> closed (probes_succeeded)
	// state: closed
}

func ExampleBreaker_Acquire() {
	b, err := breaker.New("llm", breaker.Config{ConsecutiveFailures: 1, CoolDown: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if p, err := b.Acquire(now); err == nil {
		p.Failure(now) // a 503: the downstream is unhealthy
	}

	now = now.Add(10 * time.Second)
	_, err = b.Acquire(now)
	var open *breaker.OpenError
	if errors.As(err, &open) {
		fmt.Println("refused, ask again in", open.RetryAfter) // wait, without spending an attempt
	}

	now = open.RetryAt
	p, err := b.Acquire(now)
	fmt.Println("probe:", err == nil && p.Probe())
	p.Release() // the caller gave up: the probe's slot is given back, nothing counted
	fmt.Println("state:", b.State(now))
	// Output:
	// refused, ask again in 20s
	// probe: true
	// state: half_open
}

// A Set keeps one breaker per downstream. A call refused by an open
// breaker is not a failure of the task that made it: turned into
// retry.RetryAfter, it waits out the cool-down instead of spending its
// attempts against a downstream known to be down.
func ExampleSet() {
	breakers, err := breaker.NewSet(breaker.Config{ConsecutiveFailures: 2, CoolDown: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(host string, fail bool) error {
		p, err := breakers.Get(host).Acquire(now)
		if open, ok := errors.AsType[*breaker.OpenError](err); ok {
			return retry.RetryAfter(err, open.RetryAfter)
		}
		if fail {
			p.Failure(now)
			return &retry.HTTPError{StatusCode: 503}
		}
		p.Success(now)
		return nil
	}

	_ = call("ocr.internal", true)
	_ = call("ocr.internal", true) // the second failure in a row opens it
	_ = call("geo.internal", false)
	now = now.Add(10 * time.Second)
	err = call("ocr.internal", false)
	class, _, wait := retry.Classify(err)
	fmt.Println(err)
	fmt.Println(class, wait, errors.Is(err, breaker.ErrOpen))
	fmt.Println(breakers.Names(), breakers.Get("geo.internal").State(now))
	// Output:
	// circuit breaker "ocr.internal" open: retry after 20s
	// transient 20s true
	// [geo.internal ocr.internal] closed
}
