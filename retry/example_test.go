package retry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/retry/retrytest"
)

func ExampleDo() {
	calls := 0
	op := func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return retry.Transient(errors.New("service busy"))
		}
		return nil
	}
	p := retry.Policy{MaxAttempts: 5, InitialDelay: 100 * time.Millisecond, Jitter: retry.JitterNone}
	hook := func(a retry.AttemptInfo) {
		fmt.Printf("attempt %d failed (%s), next in %v\n", a.Number, a.Class, a.Delay)
	}
	// A fake clock makes the example instant; leave WithClock out to really wait.
	clock := retrytest.NewAutoClock(time.Unix(0, 0))
	err := retry.Do(context.Background(), op, p, retry.WithHook(hook), retry.WithClock(clock))
	fmt.Println("err:", err)
	// Output:
	// attempt 1 failed (transient), next in 100ms
	// attempt 2 failed (transient), next in 200ms
	// err: <nil>
}

func ExampleDo_permanent() {
	op := func(ctx context.Context) error {
		return fmt.Errorf("charge card: %w", retry.Permanent(errors.New("card declined")))
	}
	err := retry.Do(context.Background(), op, retry.DefaultPolicy())
	var ex *retry.ExhaustedError
	if errors.As(err, &ex) {
		fmt.Println(ex.Stop, len(ex.Attempts))
	}
	fmt.Println(err)
	// Output:
	// non_retryable 1
	// retry: gave up after 1 attempt (non_retryable): charge card: card declined
}

func ExamplePolicy_Decide() {
	p := retry.Policy{Backoff: retry.BackoffExponential, InitialDelay: time.Second, MaxAttempts: 3, Jitter: retry.JitterNone}
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	for attempt := 1; attempt <= 3; attempt++ {
		d := p.Decide(retry.Input{Attempt: attempt, Now: now, Class: retry.ClassTransient}, r)
		fmt.Printf("after attempt %d: retry=%v delay=%v stop=%q\n", attempt, d.Retry, d.Delay, d.Stop)
	}
	// Output:
	// after attempt 1: retry=true delay=1s stop=""
	// after attempt 2: retry=true delay=2s stop=""
	// after attempt 3: retry=false delay=0s stop="max_attempts"
}

func ExamplePolicy_UnmarshalJSON() {
	var p retry.Policy
	err := json.Unmarshal([]byte(`{"backoff": "linear", "initial_delay_seconds": 0.5, "max_delay_seconds": 0.2}`), &p)
	fmt.Println(err, p.InitialDelay)
	fmt.Println(p.Validate())
	// Output:
	// <nil> 500ms
	// retry policy: max_delay_seconds: must be >= initial_delay_seconds (got 0.2 < 0.5)
}

func ExamplePolicy_Classify() {
	p := retry.Policy{RetryOn: []string{"503", "ETIMEDOUT"}, NoRetryOn: []string{"invalid_format"}}
	for _, err := range []error{
		&retry.HTTPError{StatusCode: 503},
		&retry.HTTPError{StatusCode: 502},
		retry.WithCode("ETIMEDOUT", errors.New("upstream timed out")),
		retry.WithCode("invalid_format", retry.Transient(errors.New("bad row"))),
	} {
		class, code, _ := p.Classify(err)
		fmt.Println(code, class)
	}
	// Output:
	// 503 transient
	// 502 permanent
	// ETIMEDOUT transient
	// invalid_format permanent
}

func ExampleParseRetryAfter() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 01 Jun 2025 12:00:30 GMT", "soon"} {
		d, ok := retry.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s false
}

func ExampleFromResponse() {
	resp := &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"5"}}}
	err := retry.FromResponse(resp, time.Now())
	class, code, wait := retry.Classify(err)
	fmt.Println(err, class, code, wait)
	// Output: http status 503 Service Unavailable transient 503 5s
}
