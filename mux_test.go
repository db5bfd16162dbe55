package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
)

func TestMuxMiddlewareAndRouting(t *testing.T) {
	mux := retryq.NewMux()
	var trail []string
	mw := func(name string) retryq.Middleware {
		return func(next retryq.Handler) retryq.Handler {
			return retryq.HandlerFunc(func(ctx context.Context, task *retryq.Task) error {
				trail = append(trail, name+">")
				err := next.ProcessTask(ctx, task)
				trail = append(trail, "<"+name)
				return err
			})
		}
	}
	mux.Use(mw("outer"), mw("inner"))
	mux.HandleFunc("b", func(ctx context.Context, task *retryq.Task) error { trail = append(trail, "b"); return nil })
	mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error { return errors.New("boom") })
	if got := strings.Join(mux.Types(), ","); got != "a,b" {
		t.Fatalf("Types() = %s", got)
	}
	if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "b"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trail, " "); got != "outer> inner> b <inner <outer" {
		t.Fatalf("middleware order: %s", got)
	}
	if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "a"}); err == nil || err.Error() != "boom" {
		t.Fatalf("handler error not passed through: %v", err)
	}
	err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "nope"})
	class, code, _ := retry.Classify(err)
	if class != retry.ClassPermanent || code != "no_handler" {
		t.Fatalf("unknown type: class %s code %q (%v)", class, code, err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a type twice did not panic")
		}
	}()
	mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error { return nil })
}

// TestMuxRefusesNilHandlersAtRegistration: a nil handler, as a Handler, a
// function, or a Handler holding a nil HandlerFunc or *Mux, panics when it
// is registered (like net/http), not at the first task of its type, where
// it would count as a failed attempt.
func TestMuxRefusesNilHandlersAtRegistration(t *testing.T) {
	for name, register := range map[string]func(*retryq.Mux){
		"Handle":                      func(m *retryq.Mux) { m.Handle("a", nil) },
		"HandleFunc":                  func(m *retryq.Mux) { m.HandleFunc("a", nil) },
		"Handle of a nil HandlerFunc": func(m *retryq.Mux) { m.Handle("a", retryq.HandlerFunc(nil)) },
		"Handle of a nil *Mux":        func(m *retryq.Mux) { m.Handle("a", (*retryq.Mux)(nil)) },
	} {
		func() {
			mux := retryq.NewMux()
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a nil handler did not panic", name)
				}
				if types := mux.Types(); len(types) != 0 {
					t.Errorf("%s with a nil handler registered %v", name, types)
				}
			}()
			register(mux)
		}()
	}
}

// TestMuxRefusesNilMiddlewareAtRegistration: a nil middleware, or one that
// returns a nil Handler, panics when it is added or when a handler it
// wraps is registered, and leaves the mux as it was and unlocked: it
// would otherwise make every task of the mux fail with a panic (or, the
// panic recovered, leave the mux locked for good).
func TestMuxRefusesNilMiddlewareAtRegistration(t *testing.T) {
	ok := func(ctx context.Context, task *retryq.Task) error { return nil }
	nilWrapper := func(retryq.Handler) retryq.Handler { return nil }
	// mustPanic runs f bounded in time: a mux left locked by an earlier
	// panic would block it.
	mustPanic := func(what string, f func()) {
		t.Helper()
		panicked := make(chan bool, 1)
		go func() {
			defer func() { panicked <- recover() != nil }()
			f()
		}()
		select {
		case p := <-panicked:
			if !p {
				t.Errorf("%s did not panic", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s blocked: the mux is locked", what)
		}
	}

	mux := retryq.NewMux()
	mux.HandleFunc("a", ok)
	mustPanic("Use(nil)", func() { mux.Use(nil) })
	mustPanic("Use of a middleware returning nil", func() { mux.Use(nilWrapper) })
	mustPanic("Use of a middleware returning a nil HandlerFunc", func() {
		mux.Use(func(retryq.Handler) retryq.Handler { return retryq.HandlerFunc(nil) })
	})
	// The mux is not left locked by the panic, nor changed.
	done := make(chan error, 1)
	go func() { done <- mux.ProcessTask(context.Background(), &retryq.Task{Type: "a"}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the mux after refused middleware: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mux is still locked after refusing a middleware")
	}

	// Added before any handler, it is refused with the first handler.
	mux = retryq.NewMux()
	mux.Use(nilWrapper)
	mustPanic("Handle under a middleware returning nil", func() { mux.HandleFunc("a", ok) })
	if types := mux.Types(); len(types) != 0 {
		t.Fatalf("refused handler registered: %v", types)
	}
}

// TestMuxRefusesTypesNoTaskCanHave: a handler registered for a type no
// task can have (empty, a space, an empty path segment) panics at
// registration, naming the type, rather than making the worker fail to
// start later with an error that does not say which registration is wrong.
func TestMuxRefusesTypesNoTaskCanHave(t *testing.T) {
	ok := func(ctx context.Context, task *retryq.Task) error { return nil }
	for _, typ := range []string{"", "email send", "a//b", strings.Repeat("x", 129)} {
		func() {
			mux := retryq.NewMux()
			defer func() {
				r := recover()
				if r == nil {
					t.Errorf("HandleFunc(%q) did not panic", typ)
					return
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, fmt.Sprintf("%q", typ)) {
					t.Errorf("HandleFunc(%q) panicked with %q, which does not name the type", typ, msg)
				}
				if types := mux.Types(); len(types) != 0 {
					t.Errorf("HandleFunc(%q) registered %v", typ, types)
				}
			}()
			mux.HandleFunc(typ, ok)
		}()
	}
	retryq.NewMux().HandleFunc("ocr.page:v2/eu-1_x", ok) // every allowed character
}

// TestMuxWrapsAHandlerOnceAtRegistration: registering a handler wraps that
// handler alone in the middleware, not every handler registered before
// again: a middleware that sets something up per handler (a metric, a
// limiter) is called once per registration, not quadratically often.
func TestMuxWrapsAHandlerOnceAtRegistration(t *testing.T) {
	calls := map[string]int{}
	mux := retryq.NewMux()
	mux.Use(func(next retryq.Handler) retryq.Handler {
		return retryq.HandlerFunc(func(ctx context.Context, task *retryq.Task) error {
			calls[task.Type]++
			return next.ProcessTask(ctx, task)
		})
	})
	wrapped := 0
	mux.Use(func(next retryq.Handler) retryq.Handler { wrapped++; return next })
	ok := func(ctx context.Context, task *retryq.Task) error { return nil }
	types := []string{"a", "b", "c", "d"}
	for _, typ := range types {
		mux.HandleFunc(typ, ok)
	}
	if wrapped != len(types) {
		t.Fatalf("registering %d handlers called the middleware %d times, want %d", len(types), wrapped, len(types))
	}
	for _, typ := range types {
		if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: typ}); err != nil || calls[typ] != 1 {
			t.Fatalf("task %s: %v, outer middleware ran %d times; want nil and 1", typ, err, calls[typ])
		}
	}
}

// TestZeroMuxIsReadyToUse: a Mux declared without NewMux registers
// handlers and middleware and routes tasks as NewMux's does, like a zero
// http.ServeMux; it panicked writing to a nil map at the first Handle.
func TestZeroMuxIsReadyToUse(t *testing.T) {
	var mux retryq.Mux
	if types := mux.Types(); len(types) != 0 {
		t.Fatalf("zero Mux has types %v", types)
	}
	var trail []string
	mux.Use(func(next retryq.Handler) retryq.Handler {
		return retryq.HandlerFunc(func(ctx context.Context, task *retryq.Task) error {
			trail = append(trail, "mw")
			return next.ProcessTask(ctx, task)
		})
	})
	mux.HandleFunc("a", func(context.Context, *retryq.Task) error { trail = append(trail, "a"); return nil })
	if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trail, " "); got != "mw a" {
		t.Fatalf("zero Mux ran %q, want \"mw a\"", got)
	}
	if got := strings.Join(mux.Types(), ","); got != "a" {
		t.Fatalf("zero Mux Types() = %s, want a", got)
	}
	var empty retryq.Mux
	err := empty.ProcessTask(context.Background(), &retryq.Task{Type: "b"})
	if class, code, _ := retry.Classify(err); class != retry.ClassPermanent || code != "no_handler" {
		t.Fatalf("zero Mux without handlers: class %s code %q (%v)", class, code, err)
	}
}

// TestMuxMiddlewareMayReadTheMux: a middleware runs when a handler is
// registered (Handle) and when middleware is added (Use); one that reads
// the Mux it wraps, to log the registered types say, must not deadlock.
func TestMuxMiddlewareMayReadTheMux(t *testing.T) {
	m := retryq.NewMux()
	var seen [][]string
	m.Use(func(h retryq.Handler) retryq.Handler {
		seen = append(seen, m.Types())
		return h
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.HandleFunc("a", func(context.Context, *retryq.Task) error { return nil })
		m.Use(func(h retryq.Handler) retryq.Handler { return h })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Handle or Use deadlocked on a middleware that calls Mux.Types")
	}
	// Handle runs the middleware before "a" is registered; Use runs it
	// again over the registered "a".
	if len(seen) != 2 || len(seen[0]) != 0 || len(seen[1]) != 1 || seen[1][0] != "a" {
		t.Fatalf("middleware saw %v, want [[] [a]]", seen)
	}
	if err := m.ProcessTask(context.Background(), &retryq.Task{Type: "a"}); err != nil {
		t.Fatalf("ProcessTask: %v", err)
	}
}
