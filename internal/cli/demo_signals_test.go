//go:build linux

package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemoSecondCtrlCLeavesNoTemporaryFiles runs the demo as a process
// with its own TMPDIR and presses Ctrl-C twice: once mid-run, once while
// it prints its summary and shuts down. The demo still shuts down as after
// one Ctrl-C: it removes the temporary database and exits 0. It used to
// restore SIGINT's default after the first, so the second killed the
// process and left the database in TMPDIR.
//
// A request to the demo's API whose body never comes holds the demo in its
// shutdown (the HTTP drain waits for it) until the second SIGINT has been
// taken. Sent only once the summary was printed, it could otherwise reach
// a demo that had finished, removed its files and let the signal go, and
// kill it: a binary built with -race sleeps 1 s in its exit
// (GORACE atexit_sleep_ms), so one run in ten failed under load.
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
	intro := readUntil(t, lines, "[  1s] enqueued")
	stalled := stallDemoRequest(t, intro)
	defer stalled.Close()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	readUntil(t, lines, "Summary after")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, waitLimit, "the demo to take the second SIGINT", func() bool {
		return !signalPending(cmd.Process.Pid, syscall.SIGINT)
	}, func() string { return "the signal is still pending in /proc/PID/status" })
	stalled.Close()                     // the demo's shutdown goes on
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

// stallDemoRequest sends the API the demo's intro names a request whose
// body never comes, and returns its connection once the request's handler
// reads the body ("Expect: 100-continue" makes the server say so): from
// then on the demo's shutdown waits for it until the connection closes.
func stallDemoRequest(t *testing.T, intro []string) net.Conn {
	t.Helper()
	var addr string
	for _, l := range intro {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "retryq API    http://"); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	if addr == "" {
		t.Fatalf("no API address in the demo's intro: %q", intro)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: 12\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitLimit))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the stalled request's handler never read its body: %q, %v", line, err)
	}
	return conn
}

// signalPending reports whether sig, sent to process pid, waits in its
// queue of signals for the whole process (ShdPnd in /proc/PID/status),
// no thread having taken it yet. A process gone has none.
func signalPending(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
