package retryq

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/retryq/retryq/internal/engine"
)

// Handler runs one attempt of a task. Returning nil completes the task; an
// error is classified by the engine (see Permanent, Transient, RetryAfter and
// WithCode) and the attempt is retried or dead-lettered per the type's
// policy. Handlers must not retry on their own. A panic is recovered and
// recorded as the attempt's failure (code "panic", with its stack), which
// is retried as an error of unknown class is; so is a handler that calls
// runtime.Goexit (t.FailNow, for one), whose message names it.
//
// ctx ends, and context.Cause(ctx) says why (match it with errors.Is),
// when:
//   - the attempt runs past its type's timeout (TypeConfig.Timeout, else
//     Options.DefaultTimeout), ErrAttemptTimeout: an error returned then is
//     a transient failure with code deadline_exceeded;
//   - the task is cancelled (Client.Cancel: at once in this process and,
//     on PostgreSQL, in the others; on SQLite another process notices at
//     its next heartbeat), ErrTaskCancelled: nothing the handler returns is
//     recorded;
//   - the task's lease is lost (the database could not be reached to extend
//     it for a whole lease), ErrLeaseLost: nothing is recorded, the task
//     runs again;
//   - the worker stops (its Run context ends, or Client.Close) and the
//     handler has not returned within WorkerConfig.ShutdownGrace,
//     ErrWorkerStopped: an error returned then is not counted as an
//     attempt, and the task runs again.
//
// Delivery is at least once: a task may run again after its handler did its
// work (a crash or a lost lease before the outcome was recorded), so make
// handlers idempotent.
type Handler interface {
	ProcessTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// ProcessTask calls f.
func (f HandlerFunc) ProcessTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// Mux routes tasks to handlers by type. The zero Mux is empty and ready to
// use, as NewMux's is. It is safe for concurrent use: handlers may be
// registered while a worker dispatches through it (a worker fetches only
// the types its WorkerConfig had at NewWorker, though).
type Mux struct {
	// reg serializes Handle and Use. It is held while middleware wraps a
	// handler, and mu is not, so a middleware may call the Mux's readers
	// (Types, ProcessTask) without deadlock.
	reg     sync.Mutex
	mu      sync.RWMutex // guards the fields below; written only under reg too
	m       map[string]Handler
	mw      []Middleware
	wrapped map[string]Handler // m wrapped in mw, rebuilt on Handle and Use
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{m: make(map[string]Handler), wrapped: make(map[string]Handler)} }

// Handle registers h for tasks of type typ, wrapped at once in the
// middleware added so far (each middleware is called once for h). It
// panics on a duplicate or nil registration, like net/http, and on a type
// no task can have (see Client.Enqueue).
func (m *Mux) Handle(typ string, h Handler) {
	if nilHandler(h) {
		panic("retryq: nil handler for type " + typ)
	}
	if err := engine.ValidateType("type", typ); err != nil {
		panic(fmt.Sprintf("retryq: handler for type %q: %v", typ, err))
	}
	m.reg.Lock()
	defer m.reg.Unlock()
	// Under reg nothing else writes the fields, so they are read here
	// without mu, and mu is held only to write them.
	if _, dup := m.m[typ]; dup {
		panic("retryq: multiple registrations for type " + typ)
	}
	w, err := wrap(typ, h, m.mw)
	if err != "" {
		panic(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil { // a zero Mux
		m.m, m.wrapped = make(map[string]Handler), make(map[string]Handler)
	}
	m.m[typ] = h
	m.wrapped[typ] = w
}

// wrap returns h wrapped in mw, the first outermost, so that dispatching a
// task does not build the chain; or a panic message when a middleware
// returns a nil Handler.
func wrap(typ string, h Handler, mw []Middleware) (Handler, string) {
	for i := len(mw) - 1; i >= 0; i-- {
		if h = mw[i](h); nilHandler(h) {
			return nil, fmt.Sprintf("retryq: middleware %d returned a nil handler for type %s", i, typ)
		}
	}
	return h, ""
}

// nilHandler reports whether h is nil, or holds a nil *Mux or
// HandlerFunc: any task it ran would fail with a panic.
func nilHandler(h Handler) bool {
	switch h := h.(type) {
	case nil:
		return true
	case *Mux:
		return h == nil
	case HandlerFunc:
		return h == nil
	}
	return false
}

// HandleFunc registers f for tasks of type typ. It panics on a duplicate or
// nil registration and on an invalid type, as Handle does.
func (m *Mux) HandleFunc(typ string, f func(ctx context.Context, t *Task) error) {
	if f == nil {
		panic("retryq: nil handler for type " + typ)
	}
	m.Handle(typ, HandlerFunc(f))
}

// Use appends middleware applied to every handler, first added outermost,
// whether registered before or after. The handlers registered before are
// wrapped again in the whole chain: a middleware is called once per
// handler at each Use and at the handler's registration, so keep state
// meant to be created once outside the function; it may call the Mux's
// Types, but not its Handle or Use, which would wait for the call that
// runs it. It panics on a nil
// middleware, and on one that returns a nil Handler, leaving the Mux as it
// was.
func (m *Mux) Use(mw ...Middleware) {
	for _, f := range mw {
		if f == nil {
			panic("retryq: nil middleware")
		}
	}
	m.reg.Lock()
	defer m.reg.Unlock()
	all := make([]Middleware, 0, len(m.mw)+len(mw))
	all = append(append(all, m.mw...), mw...)
	wrapped := make(map[string]Handler, len(m.m))
	for typ, h := range m.m {
		w, err := wrap(typ, h, all)
		if err != "" {
			panic(err)
		}
		wrapped[typ] = w
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mw, m.wrapped = all, wrapped
}

// Types returns the registered types, sorted.
func (m *Mux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.m))
	for t := range m.m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// ProcessTask dispatches to the handler registered for t.Type, wrapped in
// the middleware. A task with no handler fails permanently, with code
// no_handler.
func (m *Mux) ProcessTask(ctx context.Context, t *Task) error {
	m.mu.RLock()
	h, ok := m.wrapped[t.Type]
	m.mu.RUnlock()
	if !ok {
		return Permanent(WithCode("no_handler", fmt.Errorf("no handler registered for type %q", t.Type)))
	}
	return h.ProcessTask(ctx, t)
}
