//go:build linux

package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerSecondSignalExitsWithItsStatus: a second SIGTERM while the
// worker waits for a running command stops the command and ends the
// worker with the status of a death by that signal (128+15), as a second
// signal ends "retryq server", saying so in its log. It exited 0, as if
// the stop had been the clean one the first signal asked for.
func TestWorkerSecondSignalExitsWithItsStatus(t *testing.T) {
	s := startAPIServer(t, nil)
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
	s.cliJSON(t, &task, "tasks", "get", task.ID)
	if task.State == "running" || task.State == "succeeded" {
		t.Errorf("task whose command the second signal stopped: %s, want it given back to be retried\n%s", task.State, diag())
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
