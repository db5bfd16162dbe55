//go:build linux

package cli

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWorkerSecondSignalExitsWithItsStatus: a second SIGTERM while the
// worker waits for a running command stops the command and ends the
// worker with the status of a death by that signal (128+15), as a second
// signal ends "retryq server", saying so in its log. It exited 0, as if
// the stop had been the clean one the first signal asked for. The stopped
// command's outcome is not reported (the second signal gives reports up):
// the task stays leased, to run again once its lease expires.
func TestWorkerSecondSignalExitsWithItsStatus(t *testing.T) {
	// Its lease is left out: the server waits for no report at the end.
	s := startAPIServer(t, func(o *serverOptions) { o.shutdownTimeout = time.Second })
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `touch "`+dir+`/started"; while [ ! -e "`+dir+`/release" ]; do sleep 0.05; done`)
	t.Cleanup(func() { writeTestFile(t, filepath.Join(dir, "release"), "") })
	proc := startCLIProcess(t, nil, nil, "worker", "--server", s.url, "--types", "cli.second", "--exec", "sh "+handler,
		"--worker-id", "second-worker", "--grace", "1h")
	cmd, stderr, exited := proc.cmd, proc.stderr, proc.exited
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	var task apiTask
	s.cliJSON(t, &task, "enqueue", "cli.second")
	pollUntil(t, 20*time.Second, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	}, diag)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the worker to acknowledge SIGTERM", func() bool {
		return strings.Contains(stderr.String(), "no new tasks; letting running commands finish")
	}, diag)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not exit after a second SIGTERM\n%s", diag())
	}
	var ee *exec.ExitError
	if !errors.As(proc.waitErr, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("worker exit after a second SIGTERM: %v, want status %d\n%s", proc.waitErr, 128+int(syscall.SIGTERM), diag())
	}
	if !strings.Contains(stderr.String(), "again: stopping running commands") {
		t.Errorf("the log does not say the second signal stopped the commands\n%s", diag())
	}
	if !strings.Contains(stderr.String(), "abandoned by the second signal") {
		t.Errorf("the log does not say the stopped command's outcome was abandoned\n%s", diag())
	}
	s.cliJSON(t, &task, "tasks", "get", task.ID)
	if task.State != "running" || task.Attempt != 1 {
		t.Errorf("task whose command the second signal stopped: %s after %d attempts, want still running its first (its lease expires)\n%s",
			task.State, task.Attempt, diag())
	}
}

// TestWorkerUnderNohupIgnoresHangup: started with SIGHUP ignored (nohup),
// the worker keeps ignoring it, as "retryq server" and "retryq run" do: a
// SIGHUP followed by a SIGTERM is stopped by the SIGTERM, which the log
// names. The worker caught SIGHUP whatever its disposition, so logging out
// of the session it was started from with nohup stopped it.
func TestWorkerUnderNohupIgnoresHangup(t *testing.T) {
	if len(hangupSignals) == 0 {
		t.Skip("no hangup signal on this system")
	}
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup command")
	}
	s := startAPIServer(t, nil)
	proc := startCLIProcessUnder(t, []string{nohup}, nil, nil, "worker", "--server", s.url, "--types", "cli.nohup", "--exec", "true", "--worker-id", "nohup-worker")
	stderr := proc.stderr
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	pollUntil(t, 20*time.Second, "the worker to start", func() bool {
		return strings.Contains(stderr.String(), "nohup-worker leasing")
	}, diag)
	// nohup runs the worker in its own process (exec): signal it.
	hangUpThenTerminate(t, proc, "worker", diag)
	if !strings.Contains(stderr.String(), "received terminated: no new tasks") || strings.Contains(stderr.String(), "hangup") {
		t.Errorf("want the stop begun by SIGTERM, the SIGHUP ignored\n%s", diag())
	}
}

// TestWorkerSecondSignalAbandonsReports: a command has finished but the
// server does not answer its report (it hangs). SIGTERM waits for the
// report, as it should; a second SIGTERM gives it up at once, saying which
// task's outcome it abandoned (the task comes back when its lease
// expires), and exits 128+15. The report was still tried, the call in
// flight waited for its 60 s timeout and four more tries followed.
func TestWorkerSecondSignalAbandonsReports(t *testing.T) {
	reporting := make(chan struct{}, 1)
	leased := false
	var mu sync.Mutex
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read whole, the body lets the server see the client hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case r.URL.Path == "/v1/leases":
			mu.Lock()
			first := !leased
			leased = true
			mu.Unlock()
			if first {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"tasks":[{"id":"t1","type":"cli.hung","payload":{},"attempt":1,"lease_id":"t1.l1","lease_expires_at":"2030-01-01T00:00:00Z"}]}`)
				return
			}
		case strings.HasSuffix(r.URL.Path, "/complete"):
			select {
			case reporting <- struct{}{}:
			default:
			}
		}
		select { // later lease requests and the report hang
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return
	proc := startCLIProcess(t, nil, nil, "worker", "--server", srv.URL, "--types", "cli.hung", "--exec", "true",
		"--worker-id", "hung-worker", "--grace", "1h")
	diag := func() string { return "worker stderr:\n" + proc.stderr.String() }
	select {
	case <-reporting:
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker never reported the task\n%s", diag())
	}
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the worker to acknowledge SIGTERM", func() bool {
		return strings.Contains(proc.stderr.String(), "no new tasks; letting running commands finish")
	}, diag)
	sent := time.Now()
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not exit after a second SIGTERM\n%s", diag())
	}
	if took := time.Since(sent); took > 3*time.Second {
		t.Errorf("the worker took %v to exit after the second SIGTERM\n%s", took, diag())
	}
	var ee *exec.ExitError
	if !errors.As(proc.waitErr, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("worker exit after a second SIGTERM: %v, want status %d\n%s", proc.waitErr, 128+int(syscall.SIGTERM), diag())
	}
	if !strings.Contains(proc.stderr.String(), "task t1 (cli.hung, attempt 1) succeeded") ||
		!strings.Contains(proc.stderr.String(), "abandoned") {
		t.Errorf("the log does not say the second signal abandoned task t1's outcome\n%s", diag())
	}
}
