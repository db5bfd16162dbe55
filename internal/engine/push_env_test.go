package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// pushEnv is a started engine over a real store (SQLite or PostgreSQL).
type pushEnv struct {
	t *testing.T
	e *Engine
}

// newPushEnvOn starts an engine over a fresh store of the backend.
func newPushEnvOn(t *testing.T, backend string, lease time.Duration) *pushEnv {
	t.Helper()
	return newPushEnvWith(t, backend, Config{LeaseDuration: lease})
}

// newPushEnvWith starts an engine configured by cfg (its store, node id,
// version and poll interval are set here) over a fresh store of the backend.
func newPushEnvWith(t *testing.T, backend string, cfg Config) *pushEnv {
	t.Helper()
	ctx := context.Background()
	st := backendtest.Open(t, backend, "NORMAL")
	cfg.Store, cfg.NodeID, cfg.Version, cfg.PollInterval = st, "push-node", "test", 50*time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Close()
		_ = st.Close()
	})
	return &pushEnv{t: t, e: e}
}

// fastPolicy retries after 20 ms, up to attempts attempts.
func fastPolicy(attempts int) retry.Policy {
	return retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: 20 * time.Millisecond, MaxDelay: 5 * time.Second,
		Jitter: retry.JitterNone, MaxAttempts: attempts}
}

func (p *pushEnv) putType(typ string, pol retry.Policy, tg Target) {
	p.t.Helper()
	if _, err := p.e.PutType(context.Background(), TypeSpec{Type: typ, Policy: pol, Target: &tg}); err != nil {
		p.t.Fatalf("put type %s: %v", typ, err)
	}
}

func (p *pushEnv) enqueue(typ, payload string) string {
	p.t.Helper()
	res, err := p.e.Enqueue(context.Background(), EnqueueRequest{Type: typ, Payload: json.RawMessage(payload)})
	if err != nil {
		p.t.Fatalf("enqueue: %v", err)
	}
	return res.Task.ID
}

// wait polls the task until it is in one of the states (10 s at most).
func (p *pushEnv) wait(id string, states ...store.State) store.Task {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tk, err := p.e.Get(context.Background(), id)
		if err != nil {
			p.t.Fatalf("get %s: %v", id, err)
		}
		for _, s := range states {
			if tk.State == s {
				return tk
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("task %s: state %s after 10s, want %v (last error %+v)", id, tk.State, states, tk.LastError)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *pushEnv) attempts(id string) []store.Attempt {
	p.t.Helper()
	as, err := p.e.Attempts(context.Background(), id)
	if err != nil {
		p.t.Fatalf("attempts %s: %v", id, err)
	}
	return as
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// target starts a test server; it is closed after the engine (cleanups run
// last-in first-out, and the env is created after it). The request body is
// read in full before h runs, so that the server notices a client that
// goes away and cancels r.Context(); hang waits for that, or for the end of
// the test.
func target(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		h(w, withStop(r, stop))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: unblocks hanging handlers
	return srv
}

type stopKey struct{}

func withStop(r *http.Request, stop chan struct{}) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), stopKey{}, stop))
}

// hang blocks until the client goes away or the test ends.
func hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-r.Context().Value(stopKey{}).(chan struct{}):
	}
}

// hits records the requests a target received.
type hits struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	at     time.Time
	method string
	header http.Header
	body   string
}

func (h *hits) add(r *http.Request) int {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, recorded{at: time.Now(), method: r.Method, header: r.Header.Clone(), body: string(b)})
	return len(h.reqs)
}

func (h *hits) get() []recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recorded(nil), h.reqs...)
}
