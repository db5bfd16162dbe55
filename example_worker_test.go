package retryq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
)

// runExampleWorker runs a worker of client with mux in the background and
// returns the function that stops it and waits until it has returned.
func runExampleWorker(client *retryq.Client, cfg retryq.WorkerConfig) (stop func()) {
	w, err := retryq.NewWorker(client, cfg)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil { // Run returns nil once it has stopped
			panic(err)
		}
	}
}

// Enqueue options set a task's priority, when it is due and its own
// attempt limit. The payload is any value encoding/json encodes; an
// invalid argument is an ErrInvalid error naming it.
func ExampleClient_Enqueue() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	type email struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	res, err := client.Enqueue(ctx, "email.send", email{To: "a@example.com", Subject: "Q&A <today>"},
		retryq.WithPriority(5), retryq.WithDelay(time.Hour), retryq.WithMaxAttempts(3))
	if err != nil {
		panic(err)
	}
	t := res.Task
	fmt.Println(t.State, t.Priority, t.MaxAttempts, time.Until(t.RunAt).Round(time.Minute))
	fmt.Println(string(t.Payload))

	past, _ := client.Enqueue(ctx, "email.send", email{To: "b@example.com"}, retryq.WithRunAt(time.Unix(0, 0)))
	fmt.Println(past.Task.State)

	_, err = client.Enqueue(ctx, "email.send", nil, retryq.WithDelay(-time.Second))
	fmt.Println(errors.Is(err, retryq.ErrInvalid), err)
	// Output:
	// scheduled 5 3 1h0m0s
	// {"to":"a@example.com","subject":"Q&A <today>"}
	// pending
	// true enqueue task: WithDelay: must not be negative
}

// A Worker runs the handlers of a Mux, wrapped in its middleware, Concurrency
// at a time. Cancelling Run's context stops it: it waits for the running
// handlers (for at most ShutdownGrace) and returns nil.
func ExampleNewWorker() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	var (
		mu   sync.Mutex
		logs []string
		wg   sync.WaitGroup
	)
	mux := retryq.NewMux()
	mux.Use(func(next retryq.Handler) retryq.Handler {
		return retryq.HandlerFunc(func(ctx context.Context, t *retryq.Task) error {
			err := next.ProcessTask(ctx, t)
			result := "ok"
			if err != nil {
				class, _, _ := retry.Classify(err)
				result = "failed, " + class.String()
			}
			mu.Lock()
			logs = append(logs, fmt.Sprintf("%s attempt %d: %s", t.Type, t.Attempt, result))
			mu.Unlock()
			wg.Done()
			return err
		})
	})
	mux.HandleFunc("email.send", func(ctx context.Context, t *retryq.Task) error {
		var p struct{ To string }
		if err := t.Decode(&p); err != nil {
			return retryq.Permanent(err) // a payload that never decodes is not retried
		}
		return nil
	})
	mux.HandleFunc("sms.send", func(ctx context.Context, t *retryq.Task) error { return nil })

	wg.Add(3)
	_, _ = client.Enqueue(ctx, "email.send", map[string]string{"to": "a@example.com"})
	_, _ = client.Enqueue(ctx, "email.send", []byte(`["not", "an", "object"]`))
	_, _ = client.Enqueue(ctx, "sms.send", map[string]string{"to": "+15550100"})
	stop := runExampleWorker(client, retryq.WorkerConfig{Handler: mux, Concurrency: 4}) // fetches the Mux's types
	wg.Wait()
	stop()

	slices.Sort(logs) // handlers run concurrently
	for _, l := range logs {
		fmt.Println(l)
	}
	// Output:
	// email.send attempt 1: failed, permanent
	// email.send attempt 1: ok
	// sms.send attempt 1: ok
}

// A handler told to come back later (a rate limit, a lock held elsewhere)
// returns RetryAfter: the next attempt waits that long instead of the
// type's backoff (1s, 2s, 4s... by default), capped by its max delay.
func ExampleRetryAfter() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	done := make(chan struct{})
	mux := retryq.NewMux()
	mux.HandleFunc("report.build", func(ctx context.Context, t *retryq.Task) error {
		if t.Attempt == 1 {
			return retryq.RetryAfter(retryq.WithCode("locked", errors.New("another build holds the lock")), 50*time.Millisecond)
		}
		fmt.Println("attempt", t.Attempt, "after", t.LastError.Code)
		close(done)
		return nil
	})
	stop := runExampleWorker(client, retryq.WorkerConfig{Handler: mux})
	res, _ := client.Enqueue(ctx, "report.build", nil)
	<-done
	stop()

	hist, _ := client.Attempts(ctx, res.Task.ID)
	fmt.Println(hist[0].Outcome, hist[0].Error.Class, hist[0].Error.Code, "next attempt after", hist[0].Delay)
	// Output:
	// attempt 2 after locked
	// failed transient locked next attempt after 50ms
}

// A type's retry policy can be kept as JSON, the form the HTTP API and the
// CLI take, and stored with SetType. The attempts end at the policy's
// max_attempts; an error whose code its no_retry_on list holds is not
// retried.
func ExampleClient_SetType() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	var policy retry.Policy
	err := json.Unmarshal([]byte(`{"backoff": "fixed", "initial_delay_seconds": 0.01,
		"max_attempts": 3, "no_retry_on": ["card_declined"]}`), &policy)
	if err != nil {
		panic(err)
	}
	err = client.SetType(ctx, retryq.TypeConfig{Type: "payment.charge", Policy: policy, Timeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}

	mux := retryq.NewMux()
	mux.HandleFunc("payment.charge", func(ctx context.Context, t *retryq.Task) error {
		var p struct{ Card string }
		_ = t.Decode(&p)
		if p.Card == "0000" {
			return retryq.WithCode("card_declined", errors.New("card declined"))
		}
		return retryq.WithCode("gateway_timeout", errors.New("payment gateway timed out"))
	})
	stop := runExampleWorker(client, retryq.WorkerConfig{Handler: mux})
	defer stop()

	for _, card := range []string{"4242", "0000"} {
		res, _ := client.Enqueue(ctx, "payment.charge", map[string]string{"card": card})
		t := untilState(client, res.Task.ID, retryq.StateDead)
		fmt.Println(card, t.State, t.DeadReason, t.LastError.Code, "after", t.Attempt, "attempts")
	}
	// Output:
	// 4242 dead max_attempts gateway_timeout after 3 attempts
	// 0000 dead non_retryable card_declined after 1 attempts
}
