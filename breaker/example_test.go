package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/breaker"
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
