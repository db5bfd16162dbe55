package retryq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store/sqlite"
)

// A handler that fails with a transient error once, then succeeds; the
// engine retries it after the type's backoff.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "retryq.db")})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	policy := retry.DefaultPolicy()
	policy.InitialDelay = 10 * time.Millisecond
	client, _ := retryq.NewClient(st, retryq.Options{DefaultPolicy: policy})
	_ = client.Start(ctx)
	defer client.Close()

	done := make(chan struct{})
	mux := retryq.NewMux()
	mux.HandleFunc("ocr.page", func(ctx context.Context, t *retryq.Task) error {
		var p struct{ Doc string }
		_ = t.Decode(&p)
		if t.Attempt == 1 {
			return retryq.WithCode("503", errors.New("OCR service unavailable"))
		}
		fmt.Printf("attempt %d: recognised %s\n", t.Attempt, p.Doc)
		close(done)
		return nil
	})
	w, _ := retryq.NewWorker(client, retryq.WorkerConfig{Handler: mux, Concurrency: 2})
	wctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { _ = w.Run(wctx); close(stopped) }()

	res, _ := client.Enqueue(ctx, "ocr.page", map[string]string{"doc": "invoice.pdf"})
	<-done
	stop()
	<-stopped // the worker flushes its outcomes before returning
	task, _ := client.Get(ctx, res.Task.ID)
	hist, _ := client.Attempts(ctx, res.Task.ID)
	fmt.Println(task.State, len(hist), "attempts; first failed with", hist[0].Error.Code)
	// Output:
	// attempt 2: recognised invoice.pdf
	// succeeded 2 attempts; first failed with 503
}

// Middleware wraps every handler of a Mux, the first added outermost. A task
// of a type with no handler fails permanently with code no_handler.
func ExampleMux_Use() {
	mux := retryq.NewMux()
	logged := func(name string) retryq.Middleware {
		return func(next retryq.Handler) retryq.Handler {
			return retryq.HandlerFunc(func(ctx context.Context, t *retryq.Task) error {
				fmt.Println(name, "before", t.Type)
				err := next.ProcessTask(ctx, t)
				fmt.Println(name, "after", t.Type)
				return err
			})
		}
	}
	mux.Use(logged("outer"), logged("inner"))
	mux.HandleFunc("email.send", func(ctx context.Context, t *retryq.Task) error {
		fmt.Println("sending", string(t.Payload))
		return nil
	})
	_ = mux.ProcessTask(context.Background(), &retryq.Task{Type: "email.send", Payload: []byte(`{"to":"a@example.com"}`)})
	err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "sms.send"})
	class, code, _ := retry.Classify(err)
	fmt.Println(class, code, err)
	// Output:
	// outer before email.send
	// inner before email.send
	// sending {"to":"a@example.com"}
	// inner after email.send
	// outer after email.send
	// permanent no_handler no handler registered for type "sms.send"
}

// A Permanent error stays permanent however it is wrapped on its way out of
// the handler, and errors.Is still finds the cause.
func ExamplePermanent() {
	errBadPDF := errors.New("not a PDF")
	handlerErr := fmt.Errorf("page 3: %w", retryq.Permanent(retryq.WithCode("bad_input", errBadPDF)))
	class, code, _ := retry.Classify(handlerErr)
	fmt.Println(class, code, errors.Is(handlerErr, errBadPDF))
	fmt.Println(retryq.Permanent(nil) == nil)
	// Output:
	// permanent bad_input true
	// true
}

// openExampleClient starts a client on a SQLite file in dir.
func openExampleClient(ctx context.Context, dir string) (*retryq.Client, func()) {
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "retryq.db")})
	if err != nil {
		panic(err)
	}
	client, err := retryq.NewClient(st, retryq.Options{})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	return client, func() { _ = client.Close(); _ = st.Close() }
}

// untilState polls a task until it is in state, for at most 10 seconds.
func untilState(c *retryq.Client, id string, state retryq.State) retryq.TaskInfo {
	deadline := time.Now().Add(10 * time.Second)
	for {
		t, err := c.Get(context.Background(), id)
		if err != nil || t.State == state || time.Now().After(deadline) {
			return t
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An idempotency key makes an enqueue safe to repeat: the second enqueue
// returns the first task. A task that has not finished can be cancelled,
// once.
func ExampleWithIdempotencyKey() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	first, _ := client.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 42},
		retryq.WithIdempotencyKey("invoice-42"), retryq.WithDelay(time.Hour))
	again, _ := client.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 42},
		retryq.WithIdempotencyKey("invoice-42"))
	fmt.Println(first.Duplicate, again.Duplicate, again.Task.ID == first.Task.ID, again.Task.State)

	cancelled, _ := client.Cancel(ctx, first.Task.ID)
	fmt.Println(cancelled.State)
	_, err := client.Cancel(ctx, first.Task.ID)
	fmt.Println(errors.Is(err, retryq.ErrConflict))
	// Output:
	// false true true scheduled
	// cancelled
	// true
}

// A task whose handler fails for good lands in the dead-letter queue with
// its reason and last error. Once the cause is fixed, Redrive runs the
// matching dead tasks again.
func ExampleClient_Redrive() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	var fixed atomic.Bool
	mux := retryq.NewMux()
	mux.HandleFunc("ocr.page", func(ctx context.Context, t *retryq.Task) error {
		if !fixed.Load() {
			return retryq.Permanent(retryq.WithCode("bad_input", errors.New("not a PDF")))
		}
		return nil
	})
	w, _ := retryq.NewWorker(client, retryq.WorkerConfig{Handler: mux})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(wctx) }()

	res, _ := client.Enqueue(ctx, "ocr.page", map[string]string{"doc": "scan.tiff"})
	task := untilState(client, res.Task.ID, retryq.StateDead)
	fmt.Println(task.State, task.DeadReason, task.LastError.Code)
	groups, _ := client.DeadSummary(ctx, time.Time{})
	for _, g := range groups {
		fmt.Println(g.Type, g.ErrorCode, g.Reason, g.Count)
	}

	fixed.Store(true)
	n, _ := client.Redrive(ctx, retryq.DeadFilter{Type: "ocr.page", ErrorCode: "bad_input"})
	fmt.Println("redriven:", n)
	task = untilState(client, res.Task.ID, retryq.StateSucceeded)
	fmt.Println(task.State, "at attempt", task.Attempt)
	// Output:
	// dead non_retryable bad_input
	// ocr.page bad_input non_retryable 1
	// redriven: 1
	// succeeded at attempt 1
}

// callOCR stands for the OCR service Example_readme calls.
func callOCR(ctx context.Context, payload json.RawMessage) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:9/ocr", bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// Example_readme is the Go example of README.md: the lines between the
// README markers are the README's go block, indented by one tab
// (TestREADMEGoBlockIsExampleReadme keeps the two the same). It is
// compiled but not run, since it leaves retryq.db in the working directory.
func Example_readme() {
	ctx := context.Background()
	// README begin
	st, _ := sqlite.Open(ctx, sqlite.Config{Path: "retryq.db"})
	defer st.Close() // after the client's Close, which leaves the store open
	client, _ := retryq.NewClient(st, retryq.Options{})
	client.Start(ctx)
	defer client.Close()

	mux := retryq.NewMux()
	mux.HandleFunc("ocr.page", func(ctx context.Context, t *retryq.Task) error {
		resp, err := callOCR(ctx, t.Payload)
		if err != nil {
			return err // classified: timeouts and resets retry
		}
		defer resp.Body.Close()
		return retry.FromResponse(resp, time.Now()) // 429 + Retry-After, 5xx retry; 400 goes to the DLQ
	})
	w, _ := retryq.NewWorker(client, retryq.WorkerConfig{Handler: mux, Concurrency: 20})
	go w.Run(ctx)

	client.Enqueue(ctx, "ocr.page", map[string]any{"doc": "invoice.pdf", "page": 3},
		retryq.WithIdempotencyKey("invoice.pdf#3"))
	// README end
}
