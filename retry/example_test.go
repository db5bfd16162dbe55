package retry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"syscall"
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

// Classify recognizes context, network and HTTP errors, and the typed
// errors of Permanent, Transient, RetryAfter and WithCode, however deeply
// they are wrapped.
func ExampleClassify() {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, err := range []error{
		fmt.Errorf("call OCR: %w", context.DeadlineExceeded),
		fmt.Errorf("call OCR: %w", refused),
		&retry.HTTPError{StatusCode: 404},
		fmt.Errorf("page 3: %w", retry.RetryAfter(errors.New("rate limited"), 30*time.Second)),
		retry.WithCode("quota", retry.Permanent(errors.New("monthly quota used up"))),
		errors.New("something else"),
	} {
		class, code, wait := retry.Classify(err)
		fmt.Printf("%s %q %v\n", class, code, wait)
	}
	// Output:
	// transient "deadline_exceeded" 0s
	// transient "connection_refused" 0s
	// permanent "404" 0s
	// transient "" 30s
	// permanent "quota" 0s
	// unknown "" 0s
}

// With MaxDoublings, exponential growth turns linear: the delays of the
// example in Policy's documentation.
func ExamplePolicy_Delay() {
	p := retry.Policy{InitialDelay: 10 * time.Second, Multiplier: 2, MaxDoublings: 3,
		MaxDelay: 300 * time.Second, Jitter: retry.JitterNone}
	var delays []time.Duration
	for n := 1; n <= 8; n++ {
		delays = append(delays, p.Delay(n, 0, nil))
	}
	fmt.Println(delays)
	// Output: [10s 20s 40s 1m20s 2m40s 4m0s 5m0s 5m0s]
}

// A Policy marshals to its public JSON form, leaving zero (default) fields
// out; WithDefaults shows every effective value.
func ExamplePolicy_MarshalJSON() {
	p := retry.Policy{InitialDelay: 200 * time.Millisecond, MaxAttempts: 8, RetryOn: []string{"503"}}
	b, _ := json.Marshal(p)
	fmt.Println(string(b))
	b, _ = json.Marshal(p.WithDefaults())
	fmt.Println(string(b))
	// Output:
	// {"initial_delay_seconds":0.2,"max_attempts":8,"retry_on":["503"]}
	// {"backoff":"exponential","initial_delay_seconds":0.2,"multiplier":2,"max_delay_seconds":300,"jitter":"proportional","jitter_fraction":0.25,"max_attempts":8,"retry_on":["503"]}
}

// RetryAfter asks for the next attempt after a given wait instead of the
// policy's backoff, capped by its MaxDelay.
func ExampleRetryAfter() {
	p := retry.Policy{InitialDelay: time.Second, MaxDelay: time.Minute, Jitter: retry.JitterNone}
	for _, err := range []error{
		retry.RetryAfter(errors.New("busy"), 5*time.Second),
		retry.RetryAfter(errors.New("come back tomorrow"), 24*time.Hour),
		retry.RetryAfter(errors.New("busy"), 0), // no wait asked for: the backoff
	} {
		class, _, wait := p.Classify(err)
		d := p.Decide(retry.Input{Attempt: 1, Now: time.Unix(0, 0), Class: class, RetryAfter: wait}, nil)
		fmt.Println(class, d.Delay)
	}
	// Output:
	// transient 5s
	// transient 1m0s
	// transient 1s
}
