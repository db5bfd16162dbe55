//go:build linux

package cli

import (
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
