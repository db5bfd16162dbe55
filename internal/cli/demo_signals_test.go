//go:build linux

package cli

import (
	"bufio"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemoSecondCtrlCLeavesNoTemporaryFiles runs the demo as a process
// with its own TMPDIR and presses Ctrl-C twice: once mid-run, once while
// it prints its summary. The demo still shuts down as after one Ctrl-C:
// it removes the temporary database and exits 0. It used to restore
// SIGINT's default after the first, so the second killed the process and
// left the database in TMPDIR.
func TestDemoSecondCtrlCLeavesNoTemporaryFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	skipIfIgnored(t, syscall.SIGINT)
	clearServerEnv(t)
	tmp := t.TempDir()
	cmd := retryqCmd(t, t.TempDir(), "demo", "--duration", "1m", "--rate", "50")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	readUntil(t, lines, "[  1s] enqueued")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	readUntil(t, lines, "Summary after")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	readUntil(t, lines, "no such line") // to the end of the output
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("the demo did not exit after the second Ctrl-C")
	}
	if st := cmd.ProcessState.ExitCode(); st != exitOK {
		t.Errorf("after a second Ctrl-C: %v, want exit status 0", cmd.ProcessState)
	}
	left, _ := os.ReadDir(tmp)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) != 0 {
		t.Errorf("left behind in TMPDIR: %s", strings.Join(names, ", "))
	}
}
