//go:build linux

package cli

import (
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerStopsCleanlyOnHangup: SIGHUP (the terminal the server was
// started from closed) stops the server as SIGTERM does: it shuts down,
// logs it, and exits 0. It used to be killed by the signal (status 129),
// leaving its leases to expire and its leadership to time out.
func TestServerStopsCleanlyOnHangup(t *testing.T) {
	if len(hangupSignals) == 0 {
		t.Skip("no hangup signal on this system")
	}
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored here (nohup): the server started from here ignores it too")
	}
	clearServerEnv(t)
	proc := startCLIProcess(t, nil, nil, "server", "--db", "sqlite:"+filepath.Join(t.TempDir(), "hup.db"), "--listen", "127.0.0.1:0")
	cmd, stderr, exited := proc.cmd, proc.stderr, proc.exited
	diag := func() string { return "server log:\n" + stderr.String() }
	pollUntil(t, 20*time.Second, "the server to start", func() bool {
		return strings.Contains(stderr.String(), "retryq server started")
	}, diag)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if proc.waitErr != nil {
			t.Errorf("server exit after SIGHUP: %v, want status 0\n%s", proc.waitErr, diag())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not exit after SIGHUP\n%s", diag())
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("the server did not shut down cleanly on SIGHUP\n%s", diag())
	}
}

// TestServerUnderNohupIgnoresHangup: started with SIGHUP ignored (nohup),
// the server keeps ignoring it, as the operator asked: a SIGHUP followed by
// a SIGTERM is stopped by the SIGTERM, which the log names. The server
// used to catch SIGHUP whatever its disposition, so logging out of the
// session a server was started from with nohup stopped it.
func TestServerUnderNohupIgnoresHangup(t *testing.T) {
	if len(hangupSignals) == 0 {
		t.Skip("no hangup signal on this system")
	}
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup command")
	}
	clearServerEnv(t)
	proc := startCLIProcessUnder(t, []string{nohup}, nil, nil, "server", "--db", "sqlite:"+filepath.Join(t.TempDir(), "nohup.db"), "--listen", "127.0.0.1:0")
	stderr := proc.stderr
	diag := func() string { return "server log:\n" + stderr.String() }
	pollUntil(t, 20*time.Second, "the server to start", func() bool {
		return strings.Contains(stderr.String(), "retryq server started")
	}, diag)
	// nohup runs the server in its own process (exec): signal it.
	hangUpThenTerminate(t, proc, "server", diag)
	if !strings.Contains(stderr.String(), `msg="shutting down; a second signal exits at once" signal=terminated`) {
		t.Errorf("want the shutdown begun by SIGTERM, the SIGHUP ignored\n%s", diag())
	}
}
