//go:build linux

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procState returns the state letter of process pid in /proc ("R", "S",
// "T" for stopped...), or "" when it is gone.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// readPID waits for path to hold a process id and returns it.
func readPID(t *testing.T, path string) int {
	t.Helper()
	waitFor(t, "the attempt to start", func() bool { _, err := os.Stat(path); return err == nil })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// SIGQUIT (Ctrl-\, or kill -QUIT) stops retryq as SIGTERM does: it reaches
// the attempt's process group and ends the retries, and retryq exits with
// the attempt's status. Go's default, a dump of retryq's goroutines and
// exit status 2, left the attempt running with nobody waiting for it.
func TestRunForwardsSIGQUIT(t *testing.T) {
	checkRunForwardsStop(t, syscall.SIGQUIT, "QUIT", 131)
}

// checkRunForwardsStop runs an attempt that traps sig (by its shell name)
// and exits with status, sends sig to retryq, and checks that the attempt
// got it, was not retried and that retryq exited with its status, saying
// it was interrupted.
func checkRunForwardsStop(t *testing.T, sig syscall.Signal, name string, status int) {
	t.Helper()
	skipIfIgnored(t, sig)
	dir := t.TempDir()
	ready, marker, runs := filepath.Join(dir, "ready"), filepath.Join(dir, "marker"), filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", fmt.Sprintf("trap 'echo %s > %s; exit %d' %s\n", name, marker, status, name)+
		"echo run >> "+runs+"\necho $$ > "+ready+".tmp\nmv "+ready+".tmp "+ready+"\nwhile :; do sleep 0.05; done\n")
	cmd, lines := startRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--", job)
	pgid := readPID(t, ready)
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) }) // an attempt left running
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, lines, "retryq: interrupted")
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != status {
		t.Fatalf("status %d, want %d\n%s", got, status, strings.Join(out, "\n"))
	}
	waitFor(t, "the attempt's group to end", func() bool { return !groupAlive(t, pgid) })
	if b, err := os.ReadFile(marker); err != nil || string(b) != name+"\n" {
		t.Fatalf("child did not get SIG%s: %q %v", name, b, err)
	}
	if countLines(t, runs) != 1 {
		t.Fatalf("retried after SIG%s: %d runs", name, countLines(t, runs))
	}
	if joined := strings.Join(out, "\n"); !strings.Contains(joined, "interrupted by SIG"+name+" after 1 attempt") {
		t.Fatalf("stderr:\n%s", joined)
	}
}

// Job control stops and continues the attempt with retryq: SIGTSTP (the
// terminal's Ctrl-Z reaches retryq's process group, not the attempt's) stops
// the attempt's process group and then retryq, and SIGCONT (the shell's fg
// or bg, sent to retryq's group) continues both. Before, retryq stopped and
// its attempt ran on, while the shell reported the job stopped.
func TestRunJobControlStopsAndContinuesTheAttempt(t *testing.T) {
	skipIfIgnored(t, syscall.SIGTSTP)
	dir := t.TempDir()
	ready, proceed := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	// The attempt waits in a shell builtin (read, on a FIFO), starting no
	// process: a shell stopped in the middle of starting one (dash uses
	// vfork) waits, in state D and with the stop pending, for its child,
	// stopped before its exec, and is never seen stopped itself.
	if err := syscall.Mkfifo(proceed, 0o600); err != nil {
		t.Fatal(err)
	}
	job := script(t, dir, "job.sh", "echo $$ > "+ready+".tmp\nmv "+ready+".tmp "+ready+"\n"+
		"read line < "+proceed+"\n")
	cmd := retryqCmd(t, dir, "run", "--attempts", "1", "--", job)
	// A process group of its own whose parent, the test, is in another
	// group of the same session, as a shell's job is: not orphaned, so
	// that the kernel does not discard a stop signal sent to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errOut lockedBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		<-done
	})
	pid := readPID(t, ready)
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTSTP); err != nil { // Ctrl-Z: retryq's group
		t.Fatal(err)
	}
	waitFor(t, "the attempt to stop", func() bool { return procState(t, pid) == "T" })
	waitFor(t, "retryq to stop", func() bool { return procState(t, cmd.Process.Pid) == "T" })

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil { // fg: retryq's group
		t.Fatal(err)
	}
	waitFor(t, "the attempt to continue", func() bool { return procState(t, pid) != "T" })
	waitFor(t, "the attempt to open "+proceed, func() bool {
		// Opened without blocking, a FIFO no one reads is an error.
		f, err := os.OpenFile(proceed, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return false
		}
		defer f.Close()
		if _, err := f.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
		return true
	})
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("retryq did not finish:\n%s", errOut.String())
	}
	if status := cmd.ProcessState.ExitCode(); status != 0 {
		t.Fatalf("status %d:\n%s", status, errOut.String())
	}
}

// Run from a terminal, the attempt shares retryq's foreground process
// group: Ctrl-\ reaches it from the terminal, and retryq, which got it
// too, stops retrying without sending it a second SIGQUIT.
func TestRunFromTerminalCtrlBackslashReachesAttemptOnce(t *testing.T) {
	checkTerminalKeyReachesAttemptOnce(t, 0x1c, "Ctrl-\\", syscall.SIGQUIT, "SIGQUIT")
}
