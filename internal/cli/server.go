package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/api"
	"github.com/retryq/retryq/internal/engine"
)

func init() {
	register(&command{name: "server", summary: "run the engine, its scheduler loops and the HTTP API", run: runServer})
}

const serverUsage = `Usage: retryq server [flags]

Runs the retryq engine on the database given by --db (embedded SQLite by
default), its scheduler loops (retry promotion, lease reaping, retention)
when this node is the elected leader, and the JSON HTTP API on --listen.
Several servers may share one PostgreSQL database; one of them leads.

Without API tokens the server only listens on loopback addresses.

Retention durations need a unit: 30d (days), 1d12h, 12h or 90m; forever
keeps a class; 0 takes the default. A plain number is refused, since
elsewhere it means seconds. The start-up log shows the retention in force.

At most --max-connections HTTP connections are open at once (by default
the smaller of 4096 and half the process's file descriptor limit); more
clients wait in the kernel's accept queue until one closes. A request's
headers must arrive within 10s and its body within 30s; an idle
connection is closed after 2m.

SIGTERM, SIGINT or SIGHUP (unless ignored at start, as under nohup) stops
the server within --shutdown-timeout: it leases no more tasks, answers
/readyz 503, keeps taking pull workers' reports of the leases it handed
out for up to 10s, then drains HTTP requests, in-process handlers and push
deliveries, cutting them short (their tasks released, attempts not
counted) a quarter of the timeout (at most 5s) before it ends, then
exits; status 1 if even that did not finish in time. A second signal
exits at once.
`

// stringsValue is a repeatable string flag.
type stringsValue struct{ vals *[]string }

func (v stringsValue) String() string {
	if v.vals == nil {
		return ""
	}
	return strings.Join(*v.vals, ",")
}

func (v stringsValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	*v.vals = append(*v.vals, s)
	return nil
}

// splitEnv splits a comma-separated environment value, dropping empties.
func splitEnv(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

type serverOptions struct {
	db, listen, logFormat, logLevel, nodeID string
	apiTokens, readTokens                   []string
	noScheduler, pollOnly, noMigrate        bool
	lease, poll, leaderTTL                  time.Duration
	shutdownTimeout                         time.Duration
	retention                               retentionOptions
	maxBody                                 int64
	maxLongPolls                            int
	maxConns                                int // --max-connections
}

func parseServer(env *Env, args []string) (*serverOptions, int) {
	o := &serverOptions{}
	fs := newFlagSet("server", serverUsage)
	fs.StringVar(&o.db, "db", "", "database: sqlite:PATH or postgres://... (env RETRYQ_DB; default "+defaultDB+")")
	fs.StringVar(&o.listen, "listen", "", "HTTP API address (env RETRYQ_LISTEN; default 127.0.0.1:7420)")
	fs.Var(stringsValue{&o.apiTokens}, "api-token", "bearer `token` with full access; repeatable (env RETRYQ_API_TOKEN, comma-separated)")
	fs.Var(stringsValue{&o.readTokens}, "read-token", "bearer `token` with read-only access; repeatable (env RETRYQ_READ_TOKEN, comma-separated)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.nodeID, "node-id", "", "this node's id in the registry and leases, up to 200 bytes (default host-pid-random)")
	fs.BoolVar(&o.noScheduler, "no-scheduler", false, "never run the scheduler loops on this node")
	fs.BoolVar(&o.pollOnly, "poll-only", false, "PostgreSQL only: no LISTEN/NOTIFY (for transaction-mode poolers)")
	fs.BoolVar(&o.noMigrate, "no-migrate", false, "PostgreSQL only: do not apply migrations at start (run \"retryq migrate\" first)")
	fs.Var(durationValue{&o.lease}, "lease", "`duration` of the leases of in-process workers, extended by heartbeats: 1s to 1h (default 30s)")
	fs.Var(durationValue{&o.poll}, "poll-interval", "fallback poll `interval` when no wake-up arrives: 10ms to 1h (default 1s)")
	fs.Var(durationValue{&o.leaderTTL}, "leader-ttl", "`duration` of the scheduler leadership lease: 1s to 1h (default 10s)")
	o.retention.register(fs)
	fs.Int64Var(&o.maxBody, "max-body", api.DefaultMaxBodyBytes, "largest accepted request body in bytes")
	o.shutdownTimeout = defaultShutdownTimeout
	fs.Var(durationValue{&o.shutdownTimeout}, "shutdown-timeout", "`bound` of the whole stop after SIGTERM, SIGINT or SIGHUP: 1s to 1h (env RETRYQ_SHUTDOWN_TIMEOUT)")
	fs.IntVar(&o.maxLongPolls, "max-long-polls", engine.DefaultMaxLongPolls, "most pull lease requests waiting for work at once; one more is answered at once (503 when nothing is due)")
	fs.IntVar(&o.maxConns, "max-connections", 0, fmt.Sprintf("most HTTP connections open at once; more wait in the kernel's accept queue: 1 to %d "+
		"(default the smaller of %d and half the process's file descriptor limit)", maxMaxConnections, defaultMaxConnections))
	if st, ok := parseFlags(env, fs, args); !ok {
		return nil, st
	}
	if fs.NArg() > 0 {
		return nil, usageError(env, "server", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if err := o.maxConnsFrom(fs); err != nil {
		return nil, usageError(env, "server", err.Error())
	}
	if err := o.shutdownTimeoutFrom(env, fs); err != nil {
		return nil, usageError(env, "server", err.Error())
	}
	dbFrom := dsnSource(o.db, env)
	o.db = firstNonEmpty(o.db, env.Getenv("RETRYQ_DB"), defaultDB)
	if err := checkDSN(o.db); err != nil {
		return nil, usageError(env, "server", dbFrom+": "+err.Error())
	}
	listenFrom := "--listen"
	if o.listen == "" && env.Getenv("RETRYQ_LISTEN") != "" {
		listenFrom = "RETRYQ_LISTEN"
	}
	o.listen = firstNonEmpty(o.listen, env.Getenv("RETRYQ_LISTEN"), "127.0.0.1:7420")
	if strings.TrimSpace(o.listen) != o.listen {
		return nil, usageError(env, "server", listenFrom+": must not start or end with white space")
	}
	apiFrom, readFrom := "--api-token", "--read-token"
	for _, t := range []struct {
		toks *[]string
		from *string
		env  string
	}{{&o.apiTokens, &apiFrom, "RETRYQ_API_TOKEN"}, {&o.readTokens, &readFrom, "RETRYQ_READ_TOKEN"}} {
		if len(*t.toks) > 0 {
			continue
		}
		raw := env.Getenv(t.env)
		*t.toks, *t.from = splitEnv(raw), t.env
		if raw != "" && len(*t.toks) == 0 {
			// Set, but to nothing a request could present: starting
			// without the tokens the operator meant to set would serve
			// the API unauthenticated.
			return nil, usageError(env, "server", t.env+": holds no token (want comma-separated tokens, or leave it unset)")
		}
	}
	if err := checkNodeID(o.nodeID); err != nil {
		return nil, usageError(env, "server", "--node-id: "+err.Error())
	}
	if err := checkTokens(o.apiTokens, o.readTokens, apiFrom, readFrom); err != nil {
		return nil, usageError(env, "server", err.Error())
	}
	for _, d := range []struct {
		flag     string
		v        time.Duration
		min, max time.Duration
		def      string
	}{
		{"--lease", o.lease, time.Second, engine.MaxLeaseDuration, "30s"},
		{"--poll-interval", o.poll, minPollInterval, time.Hour, "1s"},
		{"--leader-ttl", o.leaderTTL, time.Second, time.Hour, "10s"},
	} {
		if d.v != 0 && (d.v < d.min || d.v > d.max) {
			return nil, usageError(env, "server", fmt.Sprintf("%s: must be between %v and %v, or 0 for the default %s (got %v)",
				d.flag, d.min, fmtHours(d.max), d.def, d.v))
		}
	}
	if err := o.retention.check(); err != nil {
		return nil, usageError(env, "server", err.Error())
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, usageError(env, "server", fmt.Sprintf("--log-format: want text or json, got %q", o.logFormat))
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, usageError(env, "server", "--log-level: "+err.Error())
	}
	if o.maxBody <= 0 {
		return nil, usageError(env, "server", "--max-body: must be positive")
	}
	if o.maxLongPolls <= 0 {
		return nil, usageError(env, "server", fmt.Sprintf("--max-long-polls: must be at least 1 (got %d)", o.maxLongPolls))
	}
	if err := api.CheckListen(o.listen, len(o.apiTokens)+len(o.readTokens) > 0); err != nil {
		return nil, usageError(env, "server", listenFrom+": "+err.Error())
	}
	if isSQLiteDSN(o.db) {
		// Ignoring them would start a server that does what the operator
		// ruled out: --no-migrate would migrate the file all the same.
		for _, f := range []struct {
			name, why string
			set       bool
		}{
			{"--no-migrate", "a SQLite database is always migrated when opened", o.noMigrate},
			{"--poll-only", "SQLite has no LISTEN/NOTIFY to turn off", o.pollOnly},
		} {
			if f.set {
				return nil, usageError(env, "server", f.name+": applies to PostgreSQL only ("+f.why+")")
			}
		}
	}
	return o, exitOK
}

// Bounds of --shutdown-timeout. The default leaves a node stopped by
// Kubernetes (which kills it 30 s after SIGTERM by default) 10 s to spare.
const (
	defaultShutdownTimeout = 20 * time.Second
	minShutdownTimeout     = time.Second
	maxShutdownTimeout     = time.Hour
)

// shutdownTimeoutFrom takes --shutdown-timeout from RETRYQ_SHUTDOWN_TIMEOUT
// unless the flag was given, and checks it, naming where it came from.
func (o *serverOptions) shutdownTimeoutFrom(env *Env, fs *flag.FlagSet) error {
	from, set := "--shutdown-timeout", false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "shutdown-timeout" })
	if v := env.Getenv("RETRYQ_SHUTDOWN_TIMEOUT"); !set && v != "" {
		from = "RETRYQ_SHUTDOWN_TIMEOUT"
		d, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		o.shutdownTimeout = d
	}
	if d := o.shutdownTimeout; d < minShutdownTimeout || d > maxShutdownTimeout {
		return fmt.Errorf("%s: must be between %v and %v (got %v)", from, minShutdownTimeout, fmtHours(maxShutdownTimeout), d)
	}
	return nil
}

// maxConnsFrom checks --max-connections, or sets its default when it was
// not given.
func (o *serverOptions) maxConnsFrom(fs *flag.FlagSet) error {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "max-connections" })
	if !set {
		o.maxConns = connectionsDefault(openFileLimit())
		return nil
	}
	if o.maxConns < 1 || o.maxConns > maxMaxConnections {
		return fmt.Errorf("--max-connections: must be between 1 and %d (got %d)", maxMaxConnections, o.maxConns)
	}
	return nil
}

// isSQLiteDSN reports whether openDB opens dsn as SQLite: "sqlite:PATH", or
// a bare path ending in .db.
func isSQLiteDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "sqlite:") || (strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://"))
}

// minPollInterval is the shortest --poll-interval: each poll is a query
// per fetcher, and shorter intervals keep a core busy on an idle server.
const minPollInterval = 10 * time.Millisecond

// fmtHours prints a whole number of hours as "1h" rather than "1h0m0s".
func fmtHours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

// maxNodeIDBytes bounds --node-id, as --worker-id is bounded: the id is
// stored in the node registry and, with a suffix, as the leadership
// lease's holder, which the backends bound.
const maxNodeIDBytes = 200

// checkNodeID refuses a node id the registry could not store or show:
// longer than maxNodeIDBytes, not UTF-8, or holding control characters.
// Empty is the default id.
func checkNodeID(id string) error {
	switch {
	case len(id) > maxNodeIDBytes:
		return fmt.Errorf("at most %d bytes (got %d)", maxNodeIDBytes, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("%q is not valid UTF-8", id)
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return fmt.Errorf("%q holds a control character", id)
	}
	return nil
}

// checkTokens refuses, naming the flag or environment variable they came
// from, the tokens api.NewAuth would refuse: tokens no request could
// present and tokens given with both access levels. The server checks
// them before it opens the database.
func checkTokens(apiTokens, readTokens []string, apiFrom, readFrom string) error {
	full := make(map[string]bool, len(apiTokens))
	for _, t := range apiTokens {
		if err := api.CheckToken(t); err != nil {
			return fmt.Errorf("%s: %w", apiFrom, err)
		}
		full[t] = true
	}
	for _, t := range readTokens {
		if err := api.CheckToken(t); err != nil {
			return fmt.Errorf("%s: %w", readFrom, err)
		}
		if full[t] {
			return fmt.Errorf("%s: is also given as a full-access token (%s); give each token one access level", readFrom, apiFrom)
		}
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, got %q", s)
	}
	return l, nil
}

func newLogger(env *Env, format, level string) *slog.Logger {
	lvl, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(env.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(env.Stderr, opts))
}

func runServer(ctx context.Context, env *Env, args []string) int {
	o, st := parseServer(env, args)
	if o == nil {
		return st
	}
	// A hangup (the terminal the server was started from closed, an SSH
	// session dropped) stops it as cleanly as SIGTERM: killed outright, it
	// would leave its leases to expire and its leadership to time out.
	// The first signal starts the shutdown; the second is read below. One
	// channel takes both, so that none falls through to the default action
	// between them.
	// A hangup ignored at start (nohup) stays ignored: catching it would
	// stop the server at the logout nohup was meant to outlive.
	stopSigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	for _, s := range hangupSignals {
		if !signal.Ignored(s) {
			stopSigs = append(stopSigs, s)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSigs...)
	defer signal.Stop(sigs)
	first := make(chan os.Signal, 1) // the signal that began the shutdown, for its log line
	if len(brokenPipeSignals) > 0 {
		// A log pipe whose reader went away (a log shipper restarted)
		// makes the log's writes fail instead of killing the server at
		// its next line (Go's default for standard error), which left its
		// leases to expire and its leadership to time out.
		pipes := make(chan os.Signal, 1) // never read: Notify drops what does not fit
		signal.Notify(pipes, brokenPipeSignals...)
		defer signal.Stop(pipes)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			first <- sig
			cancel()
		case <-ctx.Done():
		}
	}()
	log := newLogger(env, o.logFormat, o.logLevel)
	srv, err := startServer(ctx, o, log)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while opening the database: the stop the operator
			// asked for, not a failure (startServer has undone its work).
			log.Info("stopped before it started", "err", err)
			return exitOK
		}
		log.Error("server failed to start", "err", err)
		return 1
	}
	<-ctx.Done()
	began := time.Now()
	var why []any
	select {
	case sig := <-first:
		why = []any{"signal", sig.String()}
	default: // the caller's context ended
	}
	log.Info("shutting down; a second signal exits at once", why...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.shutdown()
	}()
	// The shutdown ends its graces before the bound (see shutdown); what
	// is still not done at the bound (the database not answering, say)
	// is left to expire, as after a crash.
	bound := time.NewTimer(srv.shutdownTimeout() - time.Since(began))
	defer bound.Stop()
	select {
	case <-done:
	case <-bound.C:
		log.Error("shutdown timeout: exiting without finishing the shutdown; what this node still holds expires on its own",
			"stage", srv.stageName(), "shutdown_timeout", srv.shutdownTimeout(), "after", time.Since(began).Round(time.Millisecond))
		return exitFailure
	case sig := <-sigs:
		// The operator will not wait: leave now, with the status of a
		// death by that signal. What the node still holds (leases,
		// the leadership) comes back when it expires, as after a crash.
		log.Warn("second signal: exiting without finishing the shutdown; this node's leases and leadership expire on their own",
			"signal", sig.String(), "after", time.Since(began).Round(time.Millisecond))
		return signalStatus(sig)
	}
	log.Info("shut down", "took", time.Since(began).Round(time.Millisecond))
	return exitOK
}

// Server is a running `retryq server`, started in-process by StartServer.
type Server struct{ rs *runningServer }

// StartServer starts in this process exactly what `retryq server ARGS`
// runs (the same flags, database opening, schema check, engine, scheduler
// election and HTTP API), for programs that need that code path with an
// in-process worker attached to its engine, such as the multi-node tests.
// Usage errors are written to env.Stderr and returned. Call Shutdown to
// stop it as the command does on SIGTERM.
func StartServer(ctx context.Context, env *Env, args []string, log *slog.Logger) (*Server, error) {
	o, _ := parseServer(env, args)
	if o == nil {
		return nil, fmt.Errorf("start server: invalid arguments %q", args)
	}
	rs, err := startServer(ctx, o, log)
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	return &Server{rs: rs}, nil
}

// Engine returns the server's engine.
func (s *Server) Engine() *engine.Engine { return s.rs.eng }

// Addr returns the address the HTTP API listens on.
func (s *Server) Addr() string { return s.rs.addr }

// Shutdown stops the HTTP API, then the engine, and closes the database.
func (s *Server) Shutdown() { s.rs.shutdown() }

// runningServer is a started engine plus its HTTP listener.
type runningServer struct {
	eng      *engine.Engine
	http     *http.Server
	listener *limitListener
	addr     string
	done     chan struct{}
	log      *slog.Logger
	closeDB  func()
	timeout  time.Duration // --shutdown-timeout; 0 for the default
	stage    atomic.Value  // string: what shutdown is doing, for the log
}

// startServer listens first, so that an address it cannot have fails the
// start before the database is opened (and migrated), the node registered
// and the leadership contested. Connections wait in the listen queue until
// the API serves.
func startServer(ctx context.Context, o *serverOptions, log *slog.Logger) (_ *runningServer, err error) {
	tl, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	maxConns := o.maxConns
	if maxConns <= 0 { // options not from parseServer
		maxConns = connectionsDefault(openFileLimit())
	}
	ln := newLimitListener(tl, maxConns)
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	st, kind, err := openDB(ctx, o.db, dbOptions{migrate: !o.noMigrate, pollOnly: o.pollOnly, logger: log})
	if err != nil {
		return nil, err
	}
	applied, known, err := st.SchemaVersion(ctx)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	if applied < known {
		st.Close()
		return nil, fmt.Errorf("database schema version %d is older than %d: run `retryq migrate --db ...` first", applied, known)
	}
	version := buildVersion()
	eng, err := engine.New(engine.Config{
		Store: st, Logger: log, NodeID: o.nodeID, Version: version,
		LeaseDuration: o.lease, PollInterval: o.poll, LeaderTTL: o.leaderTTL,
		SucceededRetention: o.retention.succeeded, CancelledRetention: o.retention.cancelled, DeadRetention: o.retention.dead,
		NodeRetention: o.retention.nodes,
		NoScheduler:   o.noScheduler,
		MaxLongPolls:  o.maxLongPolls,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := eng.Start(ctx); err != nil {
		st.Close()
		return nil, err
	}
	h, err := api.New(api.Config{Engine: eng, APITokens: o.apiTokens, ReadTokens: o.readTokens, MaxBodyBytes: o.maxBody, Logger: log})
	if err != nil {
		eng.Close()
		st.Close()
		return nil, err
	}
	// net/http's own messages (a failed accept, at the file limit, say)
	// go through the server's logger: on the standard logger they were
	// plain text lines in a JSON log.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}
	rs := &runningServer{eng: eng, http: hs, listener: ln, addr: ln.Addr().String(), done: make(chan struct{}), log: log, timeout: o.shutdownTimeout}
	go func() {
		defer close(rs.done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	rs.closeDB = func() { _ = st.Close() }
	attrs := []any{"node", eng.NodeID(), "version", version, "db", kind, "listen", rs.addr, "schema", applied,
		"auth", len(o.apiTokens)+len(o.readTokens) > 0, "max_connections", maxConns}
	if o.pollOnly {
		attrs = append(attrs, "poll_only", true)
	}
	if o.noScheduler {
		attrs = append(attrs, "scheduler", false)
	}
	log.Info("retryq server started", append(attrs, "retention", eng.Retention())...)
	if polls := eng.Config().MaxLongPolls; maxConns <= polls {
		log.Warn("--max-connections is not above --max-long-polls: waiting pull requests may hold every connection, "+
			"and other clients then wait in the accept queue until one ends; raise the file descriptor limit or --max-connections",
			"max_connections", maxConns, "max_long_polls", polls)
	}
	return rs, nil
}
