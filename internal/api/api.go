package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/outage"
)

// DefaultMaxBodyBytes is the default limit on request bodies (1 MiB).
const DefaultMaxBodyBytes int64 = 1 << 20

// DefaultBodyTimeout is the default bound on reading a request body.
const DefaultBodyTimeout = 30 * time.Second

// DefaultWriteTimeout is the default bound on a stalled response.
const DefaultWriteTimeout = 30 * time.Second

// Config configures the API handler.
type Config struct {
	// Engine serves every route. It must be started by the caller. Required.
	Engine *engine.Engine
	// APITokens grant full access. ReadTokens grant read-only access (GET
	// and HEAD). When both are empty the API is unauthenticated; see
	// [CheckListen]. Tokens must not be empty strings.
	APITokens  []string
	ReadTokens []string
	// MaxBodyBytes limits request bodies; larger bodies get 413.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BodyTimeout bounds how long a request's body may take to arrive,
	// counted from the start of its handling; a body not read whole by
	// then is answered 408 and its connection closed. It covers the body
	// only, so a long poll still waits its whole wait_seconds. Default
	// DefaultBodyTimeout.
	BodyTimeout time.Duration
	// WriteTimeout bounds each stretch of a response the client takes
	// (a write of up to 64 KiB): a client that stops reading its answer
	// for that long has its connection closed, which ends the request.
	// An answer of any size still reaches a client that reads it. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Logger receives internal errors (with request ids) and, at debug
	// level, one line per request. Default: discard. Tokens are never logged.
	Logger *slog.Logger
	// Ready backs GET /readyz: nil error means ready. Default: the store
	// answers a ping (so it is reachable and accepts writes) and its schema
	// migrations are current.
	Ready func(ctx context.Context) error
}

// server holds the handler's state; its methods are the route handlers.
type server struct {
	e            *engine.Engine
	auth         *Auth
	maxBody      int64
	bodyTimeout  time.Duration
	writeTimeout time.Duration
	log          *slog.Logger
	ready        func(ctx context.Context) error
	mux          *http.ServeMux
	routes       []route
	clock        engine.Clock
	// dbDown and notReady log the database's outages once: those the
	// requests meet (see dbOutages), and /readyz's.
	dbDown   dbOutages
	notReady outage.Tracker
}

// now is the engine clock's time.
func (s *server) now() time.Time { return s.clock.Now() }

// handlerFunc is a route handler: it writes the success response itself and
// returns an error for everything else, which the route wrapper turns into
// the JSON error response.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one registered (method, pattern) pair.
type route struct {
	method  string
	pattern string
	h       handlerFunc
}

// New returns the API handler.
func New(cfg Config) (http.Handler, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newServer(cfg Config) (*server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("api config: Engine: required")
	}
	auth, err := NewAuth(cfg.APITokens, cfg.ReadTokens)
	if err != nil {
		return nil, fmt.Errorf("api config: %w", err)
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, errors.New("api config: MaxBodyBytes: must not be negative")
	}
	if cfg.BodyTimeout < 0 {
		return nil, errors.New("api config: BodyTimeout: must not be negative")
	}
	if cfg.WriteTimeout < 0 {
		return nil, errors.New("api config: WriteTimeout: must not be negative")
	}
	s := &server{
		e:            cfg.Engine,
		auth:         auth,
		maxBody:      cfg.MaxBodyBytes,
		bodyTimeout:  cfg.BodyTimeout,
		writeTimeout: cfg.WriteTimeout,
		log:          cfg.Logger,
		ready:        cfg.Ready,
		mux:          http.NewServeMux(),
		clock:        cfg.Engine,
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.bodyTimeout == 0 {
		s.bodyTimeout = DefaultBodyTimeout
	}
	if s.writeTimeout == 0 {
		s.writeTimeout = DefaultWriteTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.ready == nil {
		s.ready = s.defaultReady
	}
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt.h, rt.method != http.MethodGet || rt.pattern == "/readyz"))
	}
	return s, nil
}

// routeTable lists every route. The OpenAPI document must describe exactly
// these (a test checks it).
func (s *server) routeTable() []route {
	return []route{
		{"GET", "/healthz", s.healthz},
		{"GET", "/readyz", s.readyz},
		{"GET", "/v1/openapi.json", s.openAPI},

		{"POST", "/v1/tasks", s.enqueue},
		{"POST", "/v1/tasks/batch", s.enqueueBatch},
		{"GET", "/v1/tasks", s.listTasks},
		{"GET", "/v1/tasks/{id}", s.getTask},
		{"POST", "/v1/tasks/{id}/cancel", s.cancelTask},
		{"POST", "/v1/tasks/{id}/retry", s.retryTask},
		{"POST", "/v1/tasks/{id}/complete", s.completeTask},
		{"POST", "/v1/tasks/{id}/fail", s.failTask},

		{"GET", "/v1/types", s.listTypes},
		{"GET", "/v1/types/{type...}", s.getType},
		{"PUT", "/v1/types/{type...}", s.putType},

		{"GET", "/v1/dlq", s.listDead},
		{"GET", "/v1/dlq/summary", s.deadSummary},
		{"POST", "/v1/dlq/redrive", s.redrive},
		{"POST", "/v1/dlq/purge", s.purge},

		{"GET", "/v1/stats", s.stats},
		{"GET", "/v1/nodes", s.nodes},

		{"POST", "/v1/leases", s.lease},
		{"POST", "/v1/leases/{lease_id}/heartbeat", s.heartbeat},
	}
}

// publicPaths need no token even when authentication is enabled.
var publicPaths = map[string]bool{
	"/healthz":         true,
	"/readyz":          true,
	"/v1/openapi.json": true,
}

// wrap turns a handlerFunc into an http.Handler that writes returned
// errors. A success may end an outage the API logged (outageSucceeded):
// that of a route that writes to the database, or of /readyz (writes),
// any kind; that of a read only corruption it met before, or an outage
// no write met: on SQLite reads still work while another process holds
// the write lock, and one between two failed writes would end the outage.
func (s *server) wrap(h handlerFunc, writes bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.outageSucceeded(r, writes)
	})
}

// ServeHTTP runs the middleware chain: request id, recovery, access log,
// authentication, then routing with JSON 404/405 bodies.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := requestID(r)
	w.Header().Set("X-Request-Id", id)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
	rc := http.NewResponseController(w)
	sw := &statusWriter{ResponseWriter: w, rc: rc, writeTimeout: s.writeTimeout, now: s.e.Now}
	// No deadline left over from the connection's previous answer.
	_ = rc.SetWriteDeadline(time.Time{})
	start := time.Now()
	s.boundBody(rc, r)
	defer func() {
		if p := recover(); p != nil {
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			s.log.Error("api handler panicked", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !sw.wrote {
				s.writeError(sw, r, errInternal)
			}
		}
		s.log.Debug("api request", "request_id", id, "method", r.Method, "path", r.URL.Path,
			"status", sw.status(), "duration_ms", float64(time.Since(start).Microseconds())/1000)
	}()
	if s.auth.Enabled() && needsAuth(r.URL.Path) {
		if err := s.auth.authorize(r); err != nil {
			s.writeError(sw, r, err)
			return
		}
	}
	s.route(sw, r)
}

// boundBody gives the request's body BodyTimeout to arrive: the
// connection's read deadline is set now and cleared once the body has been
// read to its end. The server sets no deadline past the headers itself (a
// whole-request ReadTimeout would also end long polls, whose wait follows
// the body), so without it a client trickling a body, or stalling in it,
// would hold the connection and its handler forever. A body the handler
// leaves unread keeps the deadline, which then bounds the server's
// draining of it after the handler.
func (s *server) boundBody(rc *http.ResponseController, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)); err != nil {
		return // not a connection that takes deadlines (a test recorder)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}

// deadlineBody clears the connection's read deadline when its body has
// been read to the end, so that what follows (a long poll's wait, the
// next request on the connection) is not cut short by it.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.cleared {
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func needsAuth(path string) bool {
	return (path == "/v1" || strings.HasPrefix(path, "/v1/")) && !publicPaths[path]
}

// route dispatches to the mux. When no pattern matches, the mux's own
// plain-text 404/405 response is captured and replaced by a JSON error.
func (s *server) route(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w = &redirectGuard{ResponseWriter: w, s: s, r: r}
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	cw := &captureWriter{header: make(http.Header)}
	h.ServeHTTP(cw, r)
	switch cw.code {
	case http.StatusNotFound:
		s.writeError(w, r, &apiError{Status: http.StatusNotFound, Code: CodeNotFound,
			Message: fmt.Sprintf("no route %s %s", truncate(r.Method, maxEcho), truncate(r.URL.Path, maxEcho))})
	case http.StatusMethodNotAllowed:
		allow := cw.header.Get("Allow")
		w.Header().Set("Allow", allow)
		s.writeError(w, r, &apiError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", truncate(r.Method, maxEcho), truncate(r.URL.Path, maxEcho), allow)})
	default: // redirects (path cleaning): pass through
		for k, v := range cw.header {
			w.Header()[k] = v
		}
		if cw.code == 0 {
			cw.code = http.StatusOK
		}
		w.WriteHeader(cw.code)
		_, _ = w.Write(cw.body)
	}
}

// redirectGuard refuses the mux's redirects of a request other than GET
// and HEAD (a path not in its clean form, a missing trailing slash) with a
// JSON 404. A 307 asks the client to send the same request again to the
// other path, which names another resource than the one asked for:
// clients that follow it (Go's, Python's) turned a cancel of
// /v1/tasks/X/../Y/cancel into Y's cancel, and a PUT of the type "a/../b",
// a name the API refuses, into b's configuration. Route handlers never
// redirect, so every 3xx is the mux's.
type redirectGuard struct {
	http.ResponseWriter
	s       *server
	r       *http.Request
	refused bool
}

func (g *redirectGuard) WriteHeader(code int) {
	if g.refused {
		return
	}
	if code < 300 || code >= 400 {
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.refused = true
	h := g.Header()
	to := h.Get("Location")
	h.Del("Location")
	g.s.writeError(g.ResponseWriter, g.r, &apiError{Status: http.StatusNotFound, Code: CodeNotFound,
		Message: fmt.Sprintf("no route %s %s (only GET and HEAD requests are redirected to %s)",
			truncate(g.r.Method, maxEcho), truncate(g.r.URL.Path, maxEcho), truncate(to, maxEcho))})
}

func (g *redirectGuard) Write(p []byte) (int, error) {
	if g.refused {
		return len(p), nil
	}
	return g.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (g *redirectGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// captureWriter records a response in memory.
type captureWriter struct {
	header http.Header
	code   int
	body   []byte
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	c.body = append(c.body, p...)
	return len(p), nil
}

// writeChunk is the most of a response written under one write deadline.
const writeChunk = 64 << 10

// statusWriter remembers whether and with which status a response started,
// and gives each stretch of the response (writeChunk bytes) writeTimeout
// to leave: the server sets no write deadline itself (a whole-response
// WriteTimeout would cut large answers to slow readers short), so without
// it a client that never reads its answer would hold the handler and the
// connection forever.
type statusWriter struct {
	http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	// now, when set, is the clock of the Date header: the engine's, which
	// on PostgreSQL is corrected to the database server's, the clock every
	// time in an answer is on (the CLI judges ages against it).
	now   func() time.Time
	code  int
	wrote bool
}

// begin records the status of the answer's first write and stamps its
// Date header.
func (w *statusWriter) begin(code int) {
	w.code, w.wrote = code, true
	if w.now != nil {
		w.Header().Set("Date", w.now().UTC().Format(http.TimeFormat))
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.begin(code)
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.begin(http.StatusOK)
	}
	n := 0
	for {
		c := min(len(p)-n, writeChunk)
		w.extend()
		m, err := w.ResponseWriter.Write(p[n : n+c])
		n += m
		if err != nil || n == len(p) {
			return n, err
		}
	}
}

// extend moves the connection's write deadline writeTimeout ahead.
func (w *statusWriter) extend() {
	if w.rc != nil && w.writeTimeout > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.writeTimeout))
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}
