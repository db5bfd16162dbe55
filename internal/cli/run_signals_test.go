//go:build linux

package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelperCountSignals is no test of its own: run as an attempt (see
// signalCounter), it appends a line to the file named by
// RETRYQ_TEST_COUNT_SIGNALS for every SIGINT or SIGQUIT it gets, and exits 3 once
// that file's name with ".stop" added exists.
func TestHelperCountSignals(t *testing.T) {
	path := os.Getenv("RETRYQ_TEST_COUNT_SIGNALS")
	if path == "" {
		t.Skip("run as an attempt by other tests")
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT)
	count := func() {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			os.Exit(5)
		}
		fmt.Fprintln(f, "INT")
		f.Close()
	}
	fmt.Println("ready")
	tick := time.NewTicker(10 * time.Millisecond)
	for {
		select {
		case <-sigs:
			count()
		case <-tick.C:
			if _, err := os.Stat(path + ".stop"); err == nil {
				for len(sigs) > 0 {
					<-sigs
					count()
				}
				os.Exit(3)
			}
		}
	}
}

// skipIfIgnored skips a test that needs retryq to catch sig when the test
// runs with sig ignored (under nohup, say): retryq, inheriting that, keeps
// it ignored.
func skipIfIgnored(t *testing.T, sig os.Signal) {
	t.Helper()
	if signal.Ignored(sig) {
		t.Skipf("the tests run with %v ignored", sig)
	}
}

// signalCounter returns the command line of an attempt running
// TestHelperCountSignals, counting into path.
func signalCounter(path string) []string {
	return []string{"env", "-u", "RETRYQ_TEST_CLI", "RETRYQ_TEST_COUNT_SIGNALS=" + path,
		os.Args[0], "-test.run=^TestHelperCountSignals$"}
}

// Run from a terminal, the attempt shares retryq's process group, the
// terminal's foreground group: Ctrl-C reaches the attempt from the
// terminal itself. retryq must not send it a second SIGINT, which many
// programs take for "stop now, skip the clean-up" (terraform, docker
// compose, make).
func TestRunFromTerminalCtrlCReachesAttemptOnce(t *testing.T) {
	checkTerminalKeyReachesAttemptOnce(t, 3, "Ctrl-C", syscall.SIGINT, "SIGINT")
}

// checkTerminalKeyReachesAttemptOnce runs retryq run on a terminal with an
// attempt that counts the signals it gets, types key (sending sig to the
// terminal's foreground group, which retryq and its attempt share), and
// checks that retryq stops retrying, exits with the attempt's status and
// that the attempt got sig once, from the terminal, not again from retryq.
func checkTerminalKeyReachesAttemptOnce(t *testing.T, key byte, keyName string, sig syscall.Signal, sigName string) {
	t.Helper()
	skipIfIgnored(t, sig)
	dir := t.TempDir()
	master, tty := openPTY(t)
	count := filepath.Join(dir, "count")
	// retryq gets the key's signal when the attempt does, but may act on
	// it after the attempt has exited (its signal handling is scheduled
	// like any goroutine): the delay before a retry must outlast that, or
	// a second attempt starts, which the key never reached. A retry the
	// signal did not stop fails the test by waitLimit all the same.
	args := append([]string{"run", "--attempts", "3", "--delay", "1m", "--"}, signalCounter(count)...)
	done := startOnTerminal(t, dir, tty, args...)
	if out, ok := readTerminal(t, master, "ready"); !ok {
		t.Fatalf("the attempt did not start; terminal shows %q", out)
	}
	if _, err := master.Write([]byte{key}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the attempt to get "+sigName, func() bool { return countLines(t, count) > 0 })
	if err := os.WriteFile(count+".stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok := readTerminal(t, master, "interrupted by "+sigName+" after 1 attempt")
	if !ok || !strings.Contains(out, "exit status 3") {
		t.Fatalf("terminal shows %q", out)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("retryq did not exit")
	}
	if n := countLines(t, count); n != 1 {
		t.Fatalf("one %s gave the attempt %d %ss, want 1", keyName, n, sigName)
	}
}

// Started with SIGHUP ignored (nohup, or "trap ” HUP"), retryq keeps it
// ignored, for itself and for its attempts: a hangup neither stops it nor
// reaches the attempt.
func TestRunKeepsIgnoredHangup(t *testing.T) {
	dir := t.TempDir()
	ready, proceed, runs := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", "echo run >> "+runs+"\n"+
		"grep '^SigIgn:' /proc/$$/status > "+ready+".tmp\nmv "+ready+".tmp "+ready+"\n"+
		"while [ ! -e "+proceed+" ]; do sleep 0.02; done\n")
	cmd := retryqCmd(t, dir)
	cmd.Args = []string{"sh", "-c", `trap '' HUP; exec "$@"`, "sh", os.Args[0],
		"run", "--attempts", "3", "--delay", "10ms", "--", job}
	cmd.Path = "/bin/sh"
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	waitFor(t, "the attempt to start", func() bool { _, err := os.Stat(ready); return err == nil })
	b, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(b), "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("SigIgn line %q: %v", b, err)
	}
	if mask&(1<<(syscall.SIGHUP-1)) == 0 {
		t.Errorf("the attempt does not ignore SIGHUP (SigIgn %#x)", mask)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("retryq did not finish:\n%s", errOut.String())
	}
	if status := cmd.ProcessState.ExitCode(); status != 0 || countLines(t, runs) != 1 {
		t.Fatalf("status %d after %d runs, want 0 after 1:\n%s", status, countLines(t, runs), errOut.String())
	}
}

// An exit-code list names statuses as retryq reports them: 128+N for
// death by signal N. --no-retry-on-exit 137 makes a SIGKILL death final,
// and --retry-on-exit 143 makes a SIGTERM death retryable.
func TestRunExitCodeListsMatchSignalDeaths(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	tests := []struct {
		name, signal string
		flags        []string
		runs, status int
	}{
		{"deny list", "KILL", []string{"--no-retry-on-exit", "137"}, 1, 137},
		{"allow list", "TERM", []string{"--retry-on-exit", "143"}, 3, 143},
		{"not on allow list", "TERM", []string{"--retry-on-exit", "137"}, 1, 143},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.Remove(runs); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			job := script(t, dir, "job.sh", "echo run >> "+runs+"\nkill -"+tt.signal+" $$\n")
			args := append([]string{"run", "--attempts", "3", "--delay", "10ms"}, tt.flags...)
			status, _, stderr := runRetryq(t, dir, append(args, "--", job)...)
			if status != tt.status || countLines(t, runs) != tt.runs {
				t.Fatalf("status %d after %d runs, want %d after %d:\n%s", status, countLines(t, runs), tt.status, tt.runs, stderr)
			}
		})
	}
}
