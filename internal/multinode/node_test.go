package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/cli"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// The environment of a node process. When envNode is "1" the test binary
// runs nodeMain instead of the tests (see TestMain).
const (
	envNode       = "RETRYQ_MULTINODE_NODE"
	envURL        = "RETRYQ_MULTINODE_URL"
	envID         = "RETRYQ_MULTINODE_ID"
	envRunLog     = "RETRYQ_MULTINODE_RUNLOG"
	envLeaderTTL  = "RETRYQ_MULTINODE_LEADER_TTL"
	envLease      = "RETRYQ_MULTINODE_LEASE"
	envConcurrent = "RETRYQ_MULTINODE_CONCURRENCY"
)

// taskType is the one task type of the workload.
const taskType = "mn"

// payload decides what every attempt of a task does.
type payload struct {
	I int    `json:"i"` // index in the workload
	K string `json:"k"` // class: ok, flaky, fail, perm
	N int    `json:"n"` // flaky: attempts that fail before success
	D int    `json:"d"` // handler duration in milliseconds
}

// Task classes.
const (
	classOK    = "ok"    // succeeds at once
	classFlaky = "flaky" // fails transiently while attempt <= N, then succeeds
	classFail  = "fail"  // always fails transiently: dead max_attempts
	classPerm  = "perm"  // fails permanently: dead non_retryable
)

// Run results written to the run log.
const (
	resOK        = "ok"
	resTransient = "transient"
	resPermanent = "permanent"
	resCtx       = "ctx" // the handler's context ended (lease lost, timeout, shutdown)
)

// runLog appends one line per handler start ("S id attempt unixnano") and end
// ("E id attempt unixnano result"). Every line is one unbuffered write on an
// O_APPEND file, so a SIGKILL loses nothing that was written.
type runLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *runLog) write(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	_, err := l.f.WriteString(line)
	l.mu.Unlock()
	if err != nil {
		// The test cannot check anything without its log: fail loudly.
		fmt.Fprintf(os.Stderr, "multinode node: write run log: %v\n", err)
		os.Exit(3)
	}
}

// quietHandler drops the per-task log lines (tens of thousands of them) and
// keeps everything else: leadership, reaping, reconnects, failures.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "task ") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}

func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// nodeMain is one retryq node: a postgres store, a Client running the
// engine (and competing for the scheduler leadership) and a Worker. It runs
// until SIGTERM or SIGINT and then shuts down gracefully.
func nodeMain() int {
	id := os.Getenv(envID)
	log := slog.New(quietHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})}).With("node", id)
	if err := runNode(id, log); err != nil {
		log.Error("node failed", "err", err)
		return 1
	}
	log.Info("node stopped cleanly")
	return 0
}

func runNode(id string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	f, err := os.OpenFile(os.Getenv(envRunLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	runs := &runLog{f: f}

	// The node is `retryq server` itself (the code the binary runs, started
	// in-process so that a worker can attach to its engine), plus an
	// in-process worker running the workload's handler.
	env := &cli.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: os.Stderr, Getenv: os.Getenv}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	srv, err := cli.StartServer(octx, env, []string{
		"--db", os.Getenv(envURL), "--listen", "127.0.0.1:0", "--node-id", id,
		"--lease", envDuration(envLease, 5*time.Second).String(), "--poll-interval", "500ms",
		"--leader-ttl", envDuration(envLeaderTTL, 3*time.Second).String(),
	}, log)
	cancel()
	if err != nil {
		return err
	}
	defer srv.Shutdown() // after the worker's graceful shutdown: flushes the engine, closes the database

	conc, _ := strconv.Atoi(os.Getenv(envConcurrent))
	if conc <= 0 {
		conc = 16
	}
	log.Info("node ready", "pid", os.Getpid(), "api", srv.Addr())
	return srv.Engine().RunWorker(ctx, engine.WorkerConfig{ID: id + "/w", Types: []string{taskType}, Concurrency: conc,
		ShutdownGrace: 5 * time.Second, Handle: func(hctx context.Context, t *store.Task) error {
			return handle(hctx, runs, t)
		}})
}

// handle is the workload's handler: it logs the run's start and end and
// fails as the payload dictates for this attempt number.
func handle(ctx context.Context, runs *runLog, t *store.Task) error {
	runs.write("S %s %d %d\n", t.ID, t.Attempt, time.Now().UnixNano())
	res, err := decideRun(ctx, t)
	runs.write("E %s %d %d %s\n", t.ID, t.Attempt, time.Now().UnixNano(), res)
	return err
}

func decideRun(ctx context.Context, t *store.Task) (string, error) {
	var p payload
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		return resPermanent, retryq.Permanent(fmt.Errorf("bad payload: %w", err))
	}
	if p.D > 0 {
		timer := time.NewTimer(time.Duration(p.D) * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return resCtx, context.Cause(ctx)
		}
	}
	switch p.K {
	case classOK:
		return resOK, nil
	case classFlaky:
		if t.Attempt <= p.N {
			return resTransient, retryq.Transient(fmt.Errorf("flaky: attempt %d of %d failing ones", t.Attempt, p.N))
		}
		return resOK, nil
	case classFail:
		return resTransient, retryq.Transient(errors.New("always failing"))
	default:
		return resPermanent, retryq.Permanent(retryq.WithCode("poison", errors.New("permanently broken input")))
	}
}
