package retryq

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Handler runs one attempt of a task. Returning nil completes the task; an
// error is classified by the engine (see Permanent, Transient, RetryAfter and
// WithCode) and the attempt is retried or dead-lettered per the type's
// policy. Handlers must not retry on their own.
type Handler interface {
	ProcessTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// ProcessTask calls f.
func (f HandlerFunc) ProcessTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// Mux routes tasks to handlers by type.
type Mux struct {
	mu      sync.RWMutex
	m       map[string]Handler
	mw      []Middleware
	wrapped map[string]Handler // m wrapped in mw, rebuilt on Handle and Use
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{m: make(map[string]Handler)} }

// Handle registers h for tasks of type typ. It panics on a duplicate or nil
// registration, like net/http.
func (m *Mux) Handle(typ string, h Handler) {
	if h == nil {
		panic("retryq: nil handler for type " + typ)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.m[typ]; dup {
		panic("retryq: multiple registrations for type " + typ)
	}
	m.m[typ] = h
	if err := m.wrapLocked(); err != "" {
		delete(m.m, typ)
		panic(err)
	}
}

// wrapLocked rebuilds the middleware-wrapped handlers, so that dispatching
// a task does not rebuild the chain. It leaves them as they were and
// returns a panic message when a middleware returns a nil Handler. m.mu
// must be held for writing.
func (m *Mux) wrapLocked() string {
	wrapped := make(map[string]Handler, len(m.m))
	for typ, h := range m.m {
		for i := len(m.mw) - 1; i >= 0; i-- {
			if h = m.mw[i](h); h == nil {
				return fmt.Sprintf("retryq: middleware %d returned a nil handler for type %s", i, typ)
			}
		}
		wrapped[typ] = h
	}
	m.wrapped = wrapped
	return ""
}

// HandleFunc registers f for tasks of type typ. It panics on a duplicate or
// nil registration, as Handle does.
func (m *Mux) HandleFunc(typ string, f func(ctx context.Context, t *Task) error) {
	if f == nil {
		panic("retryq: nil handler for type " + typ)
	}
	m.Handle(typ, HandlerFunc(f))
}

// Use appends middleware applied to every handler, first added outermost,
// whether registered before or after. It panics on a nil middleware, and
// on one that returns a nil Handler.
func (m *Mux) Use(mw ...Middleware) {
	for _, f := range mw {
		if f == nil {
			panic("retryq: nil middleware")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.mw
	m.mw = append(m.mw[:len(m.mw):len(m.mw)], mw...)
	if err := m.wrapLocked(); err != "" {
		m.mw = prev
		panic(err)
	}
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
// the middleware. A task with no handler fails permanently.
func (m *Mux) ProcessTask(ctx context.Context, t *Task) error {
	m.mu.RLock()
	h, ok := m.wrapped[t.Type]
	m.mu.RUnlock()
	if !ok {
		return Permanent(WithCode("no_handler", fmt.Errorf("no handler registered for type %q", t.Type)))
	}
	return h.ProcessTask(ctx, t)
}
