package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
)

// newIdleClient returns a client over a fresh SQLite file, not started.
func newIdleClient(t *testing.T) *retryq.Client {
	t.Helper()
	st := openStore(t, "")
	t.Cleanup(func() { _ = st.Close() })
	c, err := retryq.NewClient(st, retryq.Options{LeaseDuration: 2 * time.Second, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// boundedCtx bounds a call that must answer at once: a hang fails the test
// with a deadline instead of stalling it.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEnqueueBeforeStartIsErrNotStarted: an enqueue before Start is
// refused with ErrNotStarted, rather than waiting for commit loops that do
// not run (for ever, under a context without deadline).
func TestEnqueueBeforeStartIsErrNotStarted(t *testing.T) {
	c := newIdleClient(t)
	ctx := boundedCtx(t)
	_, err := c.Enqueue(ctx, "a", nil)
	if !errors.Is(err, retryq.ErrNotStarted) {
		t.Fatalf("Enqueue before Start = %v, want ErrNotStarted", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Enqueue before Start waited for its context's deadline")
	}
}

// TestWorkerRunBeforeStartIsErrNotStarted: a worker run before Start is
// refused: it would run handlers whose outcomes nothing records, and hang
// at shutdown waiting for them.
func TestWorkerRunBeforeStartIsErrNotStarted(t *testing.T) {
	c := newIdleClient(t)
	mux := retryq.NewMux()
	mux.HandleFunc("a", func(context.Context, *retryq.Task) error { return nil })
	w, err := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(boundedCtx(t)) }()
	select {
	case err := <-done:
		if !errors.Is(err, retryq.ErrNotStarted) {
			t.Fatalf("Run before Start = %v, want ErrNotStarted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run before Start did not return")
	}
}

// TestClientAfterCloseIsErrClosed: once Close has returned, a second Close
// returns nil and every other call answers ErrClosed at once: Start does
// not start the loops again, and Enqueue does not wait, even on a client
// that was never started.
func TestClientAfterCloseIsErrClosed(t *testing.T) {
	for _, started := range []bool{true, false} {
		name := "never started"
		if started {
			name = "started"
		}
		t.Run(name, func(t *testing.T) {
			c := newIdleClient(t)
			if started {
				if err := c.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			ctx := boundedCtx(t)
			mux := retryq.NewMux()
			mux.HandleFunc("a", func(context.Context, *retryq.Task) error { return nil })
			w, err := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux})
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Start": func() error { return c.Start(ctx) },
				"Enqueue": func() error {
					_, err := c.Enqueue(ctx, "a", nil)
					return err
				},
				"EnqueueMany": func() error {
					_, err := c.EnqueueMany(ctx, []retryq.NewTask{{Type: "a"}})
					return err
				},
				"Get": func() error {
					_, err := c.Get(ctx, "t1")
					return err
				},
				"Attempts": func() error {
					_, err := c.Attempts(ctx, "t1")
					return err
				},
				"List": func() error {
					_, _, err := c.List(ctx, retryq.ListParams{})
					return err
				},
				"Cancel": func() error {
					_, err := c.Cancel(ctx, "t1")
					return err
				},
				"Retry": func() error {
					_, err := c.Retry(ctx, "t1")
					return err
				},
				"SetType":    func() error { return c.SetType(ctx, retryq.TypeConfig{Type: "a"}) },
				"Worker.Run": func() error { return w.Run(ctx) },
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, retryq.ErrClosed) {
					t.Errorf("%s after Close = %v, want ErrClosed", name, err)
				}
			}
			if ctx.Err() != nil {
				t.Fatal("a call after Close waited for its context's deadline")
			}
		})
	}
}

// TestNilContextIsErrInvalid: a nil context is refused with an ErrInvalid
// error naming ctx by every call that takes one, before it reaches the
// store. It panicked deep in database/sql, which held its pool's lock
// then: a caller that recovered from the panic (a server's recovery
// middleware) had every later read of the store hang for ever.
func TestNilContextIsErrInvalid(t *testing.T) {
	c := newIdleClient(t)
	mux := retryq.NewMux()
	mux.HandleFunc("a", func(context.Context, *retryq.Task) error { return nil })
	w, err := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux})
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context // a caller's mistake, on purpose
	calls := []struct {
		name string
		call func() error
	}{
		{"Start", func() error { return c.Start(nilCtx) }},
		{"Enqueue", func() error { _, err := c.Enqueue(nilCtx, "a", nil); return err }},
		{"EnqueueMany", func() error { _, err := c.EnqueueMany(nilCtx, []retryq.NewTask{{Type: "a"}}); return err }},
		{"Get", func() error { _, err := c.Get(nilCtx, "t1"); return err }},
		{"Attempts", func() error { _, err := c.Attempts(nilCtx, "t1"); return err }},
		{"List", func() error { _, _, err := c.List(nilCtx, retryq.ListParams{}); return err }},
		{"Cancel", func() error { _, err := c.Cancel(nilCtx, "t1"); return err }},
		{"Retry", func() error { _, err := c.Retry(nilCtx, "t1"); return err }},
		{"SetType", func() error { return c.SetType(nilCtx, retryq.TypeConfig{Type: "a"}) }},
		{"ListDead", func() error { _, _, err := c.ListDead(nilCtx, retryq.DeadFilter{}); return err }},
		{"DeadSummary", func() error { _, err := c.DeadSummary(nilCtx, time.Time{}); return err }},
		{"Redrive", func() error { _, err := c.Redrive(nilCtx, retryq.DeadFilter{}); return err }},
		{"Purge", func() error { _, err := c.Purge(nilCtx, retryq.DeadFilter{}); return err }},
		{"Worker.Run", func() error { return w.Run(nilCtx) }},
	}
	check := func(name string, call func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			err = call()
		}()
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), "ctx: ") {
			t.Errorf("%s(nil context) = %v, want ErrInvalid naming ctx", name, err)
		}
	}
	for _, cl := range calls {
		check(cl.name, cl.call)
	}
	// The client still works, and starts.
	ctx := boundedCtx(t)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start after the refusals: %v", err)
	}
	for _, cl := range calls[1 : len(calls)-1] {
		check(cl.name+" once started", cl.call)
	}
	if _, err := c.Get(ctx, "t1"); !errors.Is(err, retryq.ErrNotFound) {
		t.Fatalf("Get after the refusals = %v, want ErrNotFound at once", err)
	}
	if _, err := c.Enqueue(ctx, "a", nil); err != nil {
		t.Fatalf("Enqueue after the refusals: %v", err)
	}
}

// TestStartTwiceIsRefused: a second Start is refused, naming the call
// ("start client: already started"; it spoke of the engine), and leaves
// the client running.
func TestStartTwiceIsRefused(t *testing.T) {
	c := newIdleClient(t)
	ctx := boundedCtx(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err == nil || err.Error() != "start client: already started" {
		t.Fatalf("second Start = %v, want \"start client: already started\"", err)
	}
	if _, err := c.Enqueue(ctx, "a", nil); err != nil {
		t.Fatalf("Enqueue after a second Start: %v", err)
	}
}
