//go:build linux

package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns the master end (non-blocking, so reads honour deadlines)
// and the terminal end of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	fd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
			syscall.Close(fd)
			t.Skipf("pseudo-terminal ioctl %#x: %v", req, e)
		}
	}
	var unlock int32
	ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	var n uint32
	ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	master = os.NewFile(uintptr(fd), "ptmx")
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Skipf("open terminal: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	return master, tty
}

// readTerminal reads the master end of a pseudo-terminal until its output
// contains want or the deadline passes, and returns what it read.
func readTerminal(t *testing.T, master *os.File, want string) (string, bool) {
	t.Helper()
	var got bytes.Buffer
	deadline := time.Now().Add(waitLimit)
	buf := make([]byte, 1024)
	for !strings.Contains(got.String(), want) {
		if err := master.SetReadDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		n, err := master.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			return got.String(), strings.Contains(got.String(), want)
		}
	}
	return got.String(), true
}

// startOnTerminal starts retryq as the leader of a new session whose
// controlling terminal is tty, as a shell starts it from a terminal.
func startOnTerminal(t *testing.T, dir string, tty *os.File, args ...string) (done <-chan struct{}) {
	t.Helper()
	cmd := retryqCmd(t, dir, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() { cmd.Wait(); close(ch) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-ch
	})
	return ch
}

// Run from a terminal, an attempt can read from it: it is not put in a
// background process group, where reading the terminal stops it (SIGTTIN)
// and retryq waits for it forever.
func TestRunAttemptCanReadTheTerminal(t *testing.T) {
	dir := t.TempDir()
	master, tty := openPTY(t)
	pid := filepath.Join(dir, "pid")
	job := script(t, dir, "ask.sh", "echo $$ > "+pid+"\nprintf 'name? '\nread name\necho \"got $name\"\n")
	t.Cleanup(func() { // an attempt left stopped on the terminal
		if b, err := os.ReadFile(pid); err == nil {
			var p int
			if _, err := fmt.Sscan(string(b), &p); err == nil && p > 0 {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	done := startOnTerminal(t, dir, tty, "run", "--attempts", "2", "--delay", "10ms", "--", job)
	if out, ok := readTerminal(t, master, "name? "); !ok {
		t.Fatalf("no prompt; terminal shows %q", out)
	}
	if _, err := master.Write([]byte("ada\n")); err != nil {
		t.Fatal(err)
	}
	out, ok := readTerminal(t, master, "succeeded on attempt 1/2")
	if !ok || !strings.Contains(out, "got ada") {
		t.Fatalf("the attempt did not read the terminal; it shows %q", out)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("retryq did not exit")
	}
}

// Run from a terminal, Ctrl-C stops the attempt and retryq, without a
// retry, as SIGINT does elsewhere.
func TestRunFromTerminalStopsOnCtrlC(t *testing.T) {
	skipIfIgnored(t, syscall.SIGINT)
	dir := t.TempDir()
	master, tty := openPTY(t)
	runs := filepath.Join(dir, "runs")
	job := script(t, dir, "loop.sh", "echo run >> "+runs+"\necho ready\nwhile :; do sleep 0.05; done\n")
	// The delay outlasts retryq's own handling of the terminal's SIGINT,
	// which can come after the attempt died of it (see
	// checkTerminalKeyReachesAttemptOnce).
	done := startOnTerminal(t, dir, tty, "run", "--attempts", "3", "--delay", "1m", "--", job)
	if out, ok := readTerminal(t, master, "ready"); !ok {
		t.Fatalf("the attempt did not start; terminal shows %q", out)
	}
	if _, err := master.Write([]byte{3}); err != nil { // ^C, the terminal's interrupt character
		t.Fatal(err)
	}
	out, ok := readTerminal(t, master, "interrupted by SIGINT after 1 attempt")
	if !ok || !strings.Contains(out, "exit status 130") {
		t.Fatalf("terminal shows %q", out)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("retryq did not exit")
	}
	if n := countLines(t, runs); n != 1 {
		t.Fatalf("%d attempts after Ctrl-C, want 1", n)
	}
}

// Run from a terminal, where the attempt shares retryq's process group,
// --timeout still stops it (its own process, signalled alone).
func TestRunFromTerminalTimesOutTheAttempt(t *testing.T) {
	dir := t.TempDir()
	master, tty := openPTY(t)
	job := script(t, dir, "hang.sh", "while :; do sleep 0.05; done\n")
	// The grace is long: the shell blocks signals while it starts a
	// command (dash uses vfork), until the child's exec, and a SIGTERM
	// sent then waits for it, which a loaded machine can delay past a
	// short grace: the shell then died of the SIGKILL.
	done := startOnTerminal(t, dir, tty, "run", "--attempts", "2", "--delay", "10ms", "--jitter", "none",
		"--timeout", "300ms", "--grace", "10s", "--", job)
	out, ok := readTerminal(t, master, "failed after 2 attempts")
	if !ok || !strings.Contains(out, "attempt 1/2 timeout=300ms signal=TERM class=transient next in 10ms") ||
		!strings.Contains(out, "exit status 143") {
		t.Fatalf("terminal shows %q", out)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("retryq did not exit")
	}
}
