//go:build unix

package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
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

// TestServerSecondSignalExitsAtOnce: a second SIGTERM while the server
// drains (here, a push delivery the target never answers, which the
// shutdown waits for) ends the process at once, with the status of a death
// by that signal (128+15) and a log line saying the drain was cut short;
// the database opens cleanly afterwards and still holds the task. The
// second signal used to kill the process by the signal's default action,
// the log ending at "shutting down" with no word of why.
func TestServerSecondSignalExitsAtOnce(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "sig.db")
	proc := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0")
	cmd, stderr, exited, diag := proc.cmd, proc.stderr, proc.exited, proc.diag
	proc.deliverToHangingTarget(t, "")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the server to begin its shutdown", func() bool {
		return strings.Contains(stderr.String(), "shutting down")
	}, diag)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("the server did not exit within 5s of a second SIGTERM\n%s", diag())
	}
	if took := time.Since(sent); took > 3*time.Second {
		t.Errorf("the server took %v to exit after the second SIGTERM", took)
	}
	var ee *exec.ExitError
	if !errors.As(proc.waitErr, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("exit after a second SIGTERM: %v, want status %d\n%s", proc.waitErr, 128+int(syscall.SIGTERM), diag())
	}
	if !strings.Contains(stderr.String(), "second signal") {
		t.Errorf("the log does not say a second signal cut the shutdown short\n%s", diag())
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("open the database after a forced exit: %v", err)
	}
	defer st.Close()
	tasks, _, err := st.ListTasks(context.Background(), store.ListParams{Type: "hook", Limit: 10})
	if err != nil || len(tasks) != 1 {
		t.Errorf("tasks after a forced exit: %d, %v; want the one task", len(tasks), err)
	}
}

// TestServerSurvivesAClosedLogPipe: the server's log goes to a pipe whose
// reader goes away (a log shipper restarted, `retryq server | tee` with
// tee killed). Writing a log line then fails instead of killing the
// server: SIGTERM still stops it cleanly, with status 0, the node recorded
// as stopped and the leadership released. Go's default for a write to a
// broken pipe on standard error is to die of SIGPIPE, which killed the
// server at its next log line (here "shutting down") with its leases and
// leadership left to expire.
func TestServerSurvivesAClosedLogPipe(t *testing.T) {
	if len(brokenPipeSignals) == 0 {
		t.Skip("no broken-pipe signal on this system")
	}
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "pipe.db")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--node-id", "piped")
	cmd.Env = append(os.Environ(), "RETRYQ_TEST_CLI=1")
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// Read the log until the server leads, then close the pipe.
	started := make(chan bool, 1)
	go func() {
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				started <- false
				return
			}
			if strings.Contains(line, "elected leader") {
				started <- true
				return
			}
		}
	}()
	select {
	case ok := <-started:
		if !ok {
			t.Fatal("the server's log ended before it was elected leader")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server was not elected leader within 20s")
	}
	r.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("server exit after SIGTERM with its log pipe closed: %v, want status 0", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit within 20s of SIGTERM")
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nodes, err := st.ListNodes(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Role != engine.RoleStopped {
		t.Errorf("registry after the shutdown: %+v, want the node recorded as stopped", nodes)
	}
	if _, err := st.GetLeader(context.Background(), "scheduler"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("leader lease after the shutdown: %v, want it released (not found)", err)
	}
}
