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
	m.wrapLocked()
}

// wrapLocked rebuilds the middleware-wrapped handlers, so that dispatching
// a task does not rebuild the chain. m.mu must be held for writing.
func (m *Mux) wrapLocked() {
	m.wrapped = make(map[string]Handler, len(m.m))
	for typ, h := range m.m {
		for i := len(m.mw) - 1; i >= 0; i-- {
			h = m.mw[i](h)
		}
		m.wrapped[typ] = h
	}
}

// HandleFunc registers f for tasks of type typ.
func (m *Mux) HandleFunc(typ string, f func(ctx context.Context, t *Task) error) {
	m.Handle(typ, HandlerFunc(f))
}

// Use appends middleware applied to every handler, first added outermost.
func (m *Mux) Use(mw ...Middleware) {
	m.mu.Lock()
	m.mw = append(m.mw, mw...)
	m.wrapLocked()
	m.mu.Unlock()
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
