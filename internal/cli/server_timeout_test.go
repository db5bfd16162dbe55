//go:build unix

package cli

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestServerShutdownTimeoutFlag: --shutdown-timeout (or
// RETRYQ_SHUTDOWN_TIMEOUT, which the flag overrides) takes a duration from
// 1s to 1h, 20s by default; anything else is a usage error naming where
// the value came from.
func TestServerShutdownTimeoutFlag(t *testing.T) {
	clearServerEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	for _, c := range []struct {
		env  string
		args []string
		want time.Duration
		bad  string // the name the error must give, if refused
	}{
		{args: nil, want: 20 * time.Second},
		{args: []string{"--shutdown-timeout", "5s"}, want: 5 * time.Second},
		{env: "7s", want: 7 * time.Second},
		{env: "7s", args: []string{"--shutdown-timeout", "3s"}, want: 3 * time.Second},
		{env: "junk", args: []string{"--shutdown-timeout", "3s"}, want: 3 * time.Second},
		{args: []string{"--shutdown-timeout", "0"}, bad: "--shutdown-timeout"},
		{args: []string{"--shutdown-timeout", "-1s"}, bad: "--shutdown-timeout"},
		{args: []string{"--shutdown-timeout", "500ms"}, bad: "--shutdown-timeout"},
		{args: []string{"--shutdown-timeout", "2h"}, bad: "--shutdown-timeout"},
		{env: "junk", bad: "RETRYQ_SHUTDOWN_TIMEOUT"},
		{env: "0", bad: "RETRYQ_SHUTDOWN_TIMEOUT"},
		{env: "3h", bad: "RETRYQ_SHUTDOWN_TIMEOUT"},
	} {
		var stderr strings.Builder
		env := &Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(k string) string {
			if k == "RETRYQ_SHUTDOWN_TIMEOUT" {
				return c.env
			}
			return ""
		}}
		o, st := parseServer(env, append([]string{"--db", db}, c.args...))
		switch {
		case c.bad != "":
			if o != nil || st != exitUsage || !strings.Contains(stderr.String(), c.bad+": ") {
				t.Errorf("env %q, args %q: status %d, stderr %q; want a usage error naming %s", c.env, c.args, st, stderr.String(), c.bad)
			}
		case o == nil:
			t.Errorf("env %q, args %q: refused (%d): %s", c.env, c.args, st, stderr.String())
		case o.shutdownTimeout != c.want:
			t.Errorf("env %q, args %q: shutdown timeout %v, want %v", c.env, c.args, o.shutdownTimeout, c.want)
		}
	}
}

// TestServerShutdownTimeoutBoundsTheStop: with --shutdown-timeout 3s, a
// server whose push delivery is never answered and whose HTTP API holds a
// request whose body never comes stops on SIGTERM within the bound (plus
// a margin for a loaded machine), says in its log what it cut short, exits
// 0 and leaves the pushed task pending with its attempt not counted. The
// drain used to take 10 s for the request, then 10 s + 5 s for the
// delivery, past Kubernetes' 30 s grace once anything else was slow.
func TestServerShutdownTimeoutBoundsTheStop(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "bound.db")
	const bound = 3 * time.Second
	proc := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--shutdown-timeout", bound.String())
	cmd, stderr, exited, diag := proc.cmd, proc.stderr, proc.exited, proc.diag
	proc.deliverToHangingTarget(t, `"timeout_seconds":600`)
	// A request whose body never comes holds the HTTP drain.
	slow, err := net.Dial("tcp", proc.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := fmt.Fprintf(slow, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: 12\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := bufio.NewReader(slow).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the slow request's handler never read its body: %q, %v", line, err)
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(bound + 15*time.Second):
		t.Fatalf("the server did not exit within %v of SIGTERM\n%s", bound+15*time.Second, diag())
	}
	took := time.Since(sent)
	// The bound, plus start-up of the signal handling and process exit
	// on a loaded machine.
	if took > bound+2*time.Second {
		t.Errorf("the server took %v to stop with --shutdown-timeout %v\n%s", took, bound, diag())
	}
	if proc.waitErr != nil {
		t.Errorf("exit after a drain cut short by the timeout: %v, want status 0\n%s", proc.waitErr, diag())
	}
	if !strings.Contains(stderr.String(), "shutdown timeout") {
		t.Errorf("the log does not say the shutdown timeout cut the drain short\n%s", diag())
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tasks, _, err := st.ListTasks(context.Background(), store.ListParams{Type: "hook", Limit: 10})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("tasks after the stop: %d, %v; want the one task", len(tasks), err)
	}
	if tk := tasks[0]; tk.State != store.StatePending || tk.Attempt != 0 || tk.LeaseID != "" {
		t.Errorf("the undelivered task after the stop: state %s, attempt %d, lease %q; want pending, released, no attempt counted",
			tk.State, tk.Attempt, tk.LeaseID)
	}
	nodes, err := st.ListNodes(context.Background(), time.Time{})
	if err != nil || len(nodes) != 1 || nodes[0].Role != engine.RoleStopped {
		t.Errorf("registry after the stop: %+v, %v; want the node recorded as stopped", nodes, err)
	}
	if _, err := st.GetLeader(context.Background(), "scheduler"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("leader lease after the stop: %v, want it released (not found)", err)
	}
}

// TestServerShutdownTimeoutCutsHandlerGrace: an in-process worker whose
// handler never returns of its own accord, with an hour's ShutdownGrace,
// does not hold a server started with --shutdown-timeout 2s: Shutdown
// cancels the handler at the bound's grace end, releases its task (pending,
// attempt not counted) and returns within the bound plus a margin.
func TestServerShutdownTimeoutCutsHandlerGrace(t *testing.T) {
	clearServerEnv(t)
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	path := filepath.Join(t.TempDir(), "handler.db")
	const bound = 2 * time.Second
	s, err := StartServer(t.Context(), env, []string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0",
		"--shutdown-timeout", bound.String()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	eng := s.Engine()
	started := make(chan struct{}, 1)
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- eng.RunWorker(context.Background(), engine.WorkerConfig{Types: []string{"stuck"}, Concurrency: 1,
			ShutdownGrace: time.Hour, Handle: func(ctx context.Context, _ *store.Task) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}})
	}()
	r, err := eng.Enqueue(t.Context(), engine.EnqueueRequest{Type: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, 20*time.Second, "the handler to start")
	begun := time.Now()
	stopped := make(chan struct{})
	go func() { s.Shutdown(); close(stopped) }()
	recv(t, stopped, bound+15*time.Second, "the shutdown to end")
	if took := time.Since(begun); took > bound+2*time.Second {
		t.Errorf("shutdown took %v with --shutdown-timeout %v", took, bound)
	}
	if err := recvValue(t, workerDone, 5*time.Second, "RunWorker to return"); err != nil {
		t.Errorf("RunWorker: %v", err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tk, err := st.GetTask(context.Background(), r.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.Attempt != 0 || tk.LeaseID != "" {
		t.Errorf("the stuck handler's task: state %s, attempt %d, lease %q; want pending, released, no attempt counted", tk.State, tk.Attempt, tk.LeaseID)
	}
}

// recv waits up to limit for a value on ch.
func recv[T any](t *testing.T, ch <-chan T, limit time.Duration, what string) {
	t.Helper()
	recvValue(t, ch, limit, what)
}

// recvValue waits up to limit for a value on ch and returns it.
func recvValue[T any](t *testing.T, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for %s", limit, what)
		panic("unreachable")
	}
}

// TestServerShutdownTimeoutExitsWhenTheDrainHangs: when giving back what
// the graces' end cut short cannot finish (here the SQLite file's write
// lock is held by another connection, so the release waits for it), the
// server exits at --shutdown-timeout all the same, with status 1 and a log
// line naming what it was doing, rather than outlive its supervisor's
// grace and be killed with nothing in the log.
func TestServerShutdownTimeoutExitsWhenTheDrainHangs(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "hang.db")
	const bound = 2 * time.Second
	proc := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--shutdown-timeout", bound.String())
	cmd, stderr, exited, diag := proc.cmd, proc.stderr, proc.exited, proc.diag
	proc.deliverToHangingTarget(t, `"timeout_seconds":600`)
	// The server writes now and then (its node heartbeat): wait for its
	// write lock rather than fail at once with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(bound + 15*time.Second):
		t.Fatalf("the server did not exit within %v of SIGTERM\n%s", bound+15*time.Second, diag())
	}
	if took := time.Since(sent); took > bound+2*time.Second {
		t.Errorf("the server took %v to stop with --shutdown-timeout %v\n%s", took, bound, diag())
	}
	var ee *exec.ExitError
	if !errors.As(proc.waitErr, &ee) || ee.ExitCode() != exitFailure {
		t.Errorf("exit at the shutdown timeout: %v, want status %d\n%s", proc.waitErr, exitFailure, diag())
	}
	if !strings.Contains(stderr.String(), "shutdown timeout: exiting without finishing the shutdown") ||
		!strings.Contains(stderr.String(), "stage=") {
		t.Errorf("the log does not say the shutdown timeout ended the process, and where\n%s", diag())
	}
}
