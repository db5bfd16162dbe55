package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestMain stops the throwaway PostgreSQL cluster (if a test started one)
// when the tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// offsetClock is real time shifted by an adjustable offset, so tests can
// expire leases without sleeping.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type envOpts struct {
	apiTokens, readTokens []string
	maxBody               int64
	bodyTimeout           time.Duration
	writeTimeout          time.Duration
	log                   *slog.Logger
	ready                 func(context.Context) error
	poll                  time.Duration
	sync                  string
	backend               string // backendtest.SQLite (also "") or backendtest.Postgres
	// wrap, when set, wraps the real store the engine uses (to add a hook
	// at a seam, say).
	wrap func(store.Store) store.Store
	// sqliteDir, when set, holds the SQLite file instead of t.TempDir(),
	// whose name a fuzz input's test name ("seed#0") makes unusable: a
	// SQLite path must not contain '#'.
	sqliteDir string
	// maxLongPolls is the engine's MaxLongPolls (0: the default).
	maxLongPolls int
	// store, when set, is the open store to serve (closed when the test
	// ends) instead of a new database of backend.
	store store.Store
	// engineLog, when set, is the engine's logger (else it logs nothing).
	engineLog *slog.Logger
	// connContext, when set, is the test server's ConnContext.
	connContext func(context.Context, net.Conn) context.Context
}

// env is an API server over a real store (SQLite unless envOpts.backend
// says postgres) and a started engine.
type env struct {
	t     testing.TB
	url   string
	eng   *engine.Engine
	st    store.Store
	srv   *server
	clock *offsetClock
	token string // sent by default when non-empty
	hc    *http.Client
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	if o.sync == "" {
		o.sync = "NORMAL"
	}
	if o.backend == "" {
		o.backend = backendtest.SQLite
	}
	var st store.Store
	switch {
	case o.store != nil:
		st = o.store
	case o.sqliteDir != "" && o.backend == backendtest.SQLite:
		s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(o.sqliteDir, "retryq.db"), Synchronous: o.sync})
		if err != nil {
			t.Fatalf("open sqlite store: %v", err)
		}
		st = s
	default:
		st = backendtest.Open(t, o.backend, o.sync)
	}
	if o.poll == 0 {
		o.poll = 50 * time.Millisecond
	}
	clk := &offsetClock{}
	engStore := st
	if o.wrap != nil {
		engStore = o.wrap(st)
	}
	eng, err := engine.New(engine.Config{Store: engStore, Clock: clk, PollInterval: o.poll, NodeID: "test-node", Version: "test",
		MaxLongPolls: o.maxLongPolls, Logger: o.engineLog})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatalf("start engine: %v", err)
	}
	srv, err := newServer(Config{Engine: eng, APITokens: o.apiTokens, ReadTokens: o.readTokens, MaxBodyBytes: o.maxBody, BodyTimeout: o.bodyTimeout,
		WriteTimeout: o.writeTimeout, Logger: o.log, Ready: o.ready})
	if err != nil {
		t.Fatalf("api: %v", err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.Config.ConnContext = o.connContext
	ts.Start()
	e := &env{t: t, url: ts.URL, eng: eng, st: st, srv: srv, clock: clk, hc: &http.Client{Timeout: 60 * time.Second}}
	if len(o.apiTokens) > 0 {
		e.token = o.apiTokens[0]
	}
	t.Cleanup(func() {
		ts.Close()
		eng.Close()
		st.Close()
	})
	return e
}

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	raw    []byte
	m      map[string]any
}

// errCode returns error.code of an error body.
func (r *resp) errCode() string  { return str2(r.m, "error", "code") }
func (r *resp) errField() string { return str2(r.m, "error", "field") }
func (r *resp) errMsg() string   { return str2(r.m, "error", "message") }

func str2(m map[string]any, a, b string) string {
	sub, _ := m[a].(map[string]any)
	s, _ := sub[b].(string)
	return s
}

func (r *resp) String() string { return fmt.Sprintf("%d %s", r.status, r.raw) }

type reqOpt func(*http.Request)

func withToken(tok string) reqOpt {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}
func withContentType(ct string) reqOpt {
	return func(r *http.Request) {
		if ct == "" {
			r.Header.Del("Content-Type")
		} else {
			r.Header.Set("Content-Type", ct)
		}
	}
}

// do sends a request. body is nil, a string or []byte (sent as is) or any
// other value (marshalled).
func (e *env) do(method, path string, body any, opts ...reqOpt) *resp {
	e.t.Helper()
	return e.doCtx(context.Background(), method, path, body, opts...)
}

func (e *env) doCtx(ctx context.Context, method, path string, body any, opts ...reqOpt) *resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // unknown length: sent chunked
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for _, o := range opts {
		o(req)
	}
	res, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := &resp{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.m); err != nil {
			e.t.Fatalf("%s %s: response is not a JSON object: %v: %s", method, path, err, raw)
		}
	}
	if ct := res.Header.Get("Content-Type"); len(raw) > 0 && !strings.HasPrefix(ct, "application/json") {
		e.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	if res.Header.Get("X-Request-Id") == "" {
		e.t.Fatalf("%s %s: no X-Request-Id", method, path)
	}
	return r
}

// must checks the status and returns the response.
func (e *env) must(status int, method, path string, body any, opts ...reqOpt) *resp {
	e.t.Helper()
	r := e.do(method, path, body, opts...)
	if r.status != status {
		e.t.Fatalf("%s %s: got %s, want status %d", method, path, r, status)
	}
	return r
}

// mustErr checks an error response's status, code and (when non-empty) field.
func (e *env) mustErr(status int, code, field, method, path string, body any, opts ...reqOpt) *resp {
	e.t.Helper()
	r := e.do(method, path, body, opts...)
	if r.status != status || r.errCode() != code || (field != "" && r.errField() != field) {
		e.t.Fatalf("%s %s: got %s, want %d %s field %q", method, path, r, status, code, field)
	}
	if r.errMsg() == "" {
		e.t.Fatalf("%s %s: error without message: %s", method, path, r.raw)
	}
	return r
}

func (e *env) enqueue(body map[string]any) map[string]any {
	e.t.Helper()
	return e.must(http.StatusCreated, "POST", "/v1/tasks", body).m
}

// leaseOne leases exactly one task of typ (waiting up to 5s).
func (e *env) leaseOne(typ string, extra map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"worker_id": "w1", "types": []string{typ}, "wait_seconds": 5}
	for k, v := range extra {
		body[k] = v
	}
	r := e.must(http.StatusOK, "POST", "/v1/leases", body)
	ts, _ := r.m["tasks"].([]any)
	if len(ts) != 1 {
		e.t.Fatalf("lease %s: got %s, want one task", typ, r.raw)
	}
	return ts[0].(map[string]any)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) state(id string) store.State {
	e.t.Helper()
	return store.State(e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m["state"].(string))
}

func mustTime(t testing.TB, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	tt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("not an RFC 3339 time: %v", v)
	}
	if !strings.HasSuffix(s, "Z") {
		t.Fatalf("time not in UTC: %s", s)
	}
	return tt
}
