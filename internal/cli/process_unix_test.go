//go:build unix

package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The helpers of the tests that run the CLI as a child process, on every
// Unix: the signal tests (server_signal_test.go, server_timeout_test.go)
// run there, not only on Linux.

// lockedBuffer collects a process's output for concurrent readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pollUntil calls cond every 20ms until it holds, for at most limit.
func pollUntil(t *testing.T, limit time.Duration, what string, cond func() bool, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		if cond() {
			return
		}
		if time.Now().After(deadline) || i > int(limit/(20*time.Millisecond))+1 {
			t.Fatalf("timed out after %v waiting for %s\n%s", limit, what, diag())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cliProcess is the retryq CLI run as a child process (this test binary).
type cliProcess struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{} // closed when the process has exited; then waitErr is set
	// waitErr is the process's exit (nil for status 0); read it only once
	// exited is closed.
	waitErr error
}

// startCLIProcess runs "retryq args..." as a child process with env added
// to the test's environment (RETRYQ_SERVER and RETRYQ_API_TOKEN cleared)
// and its standard output going to stdout (discarded when nil). It is
// killed at the end of the test if it is still running.
func startCLIProcess(t *testing.T, env []string, stdout io.Writer, args ...string) *cliProcess {
	t.Helper()
	return startCLIProcessUnder(t, nil, env, stdout, args...)
}

// startCLIProcessUnder is startCLIProcess run through the command line
// under (such as nohup), which must exec "retryq args..." in its own
// process.
func startCLIProcessUnder(t *testing.T, under []string, env []string, stdout io.Writer, args ...string) *cliProcess {
	t.Helper()
	argv := append(append(append([]string(nil), under...), os.Args[0]), args...)
	p := &cliProcess{cmd: exec.Command(argv[0], argv[1:]...), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), "RETRYQ_TEST_CLI=1", "RETRYQ_SERVER=", "RETRYQ_API_TOKEN="), env...)
	if stdout == nil {
		stdout = io.Discard
	}
	p.cmd.Stdout, p.cmd.Stderr = stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second // commands left running must not hold the test
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// hangUpThenTerminate sends p SIGHUP then SIGTERM, as a logout and then a
// stop would, and fails the test unless p exits with status 0 within 20 s;
// what names p in messages, diag adds its output.
func hangUpThenTerminate(t *testing.T, p *cliProcess, what string, diag func() string) {
	t.Helper()
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the %s did not exit after SIGTERM\n%s", what, diag())
	}
	if p.waitErr != nil {
		t.Errorf("%s exit: %v, want status 0\n%s", what, p.waitErr, diag())
	}
}
