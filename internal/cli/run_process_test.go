//go:build linux

package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run "retryq run" as a real process (the test binary itself,
// see TestMain) against real child processes. They synchronize on files
// and output lines with deadlines, never on fixed sleeps.

// retryqCmd returns a command running "retryq args..." in dir.
func retryqCmd(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RETRYQ_TEST_CLI=1")
	return cmd
}

// runRetryq runs retryq to completion and returns its exit status and output.
func runRetryq(t *testing.T, dir string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	cmd := retryqCmd(t, dir, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(waitLimit):
		cmd.Process.Kill()
		t.Fatalf("retryq %q did not finish; stderr:\n%s", args, errOut.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// countLines returns the number of lines in path (0 if it does not exist).
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestRunFailsTwiceThenSucceeds(t *testing.T) {
	dir := t.TempDir()
	flaky, err := filepath.Abs("../../examples/flaky.sh")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	status, stdout, stderr := runRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--jitter", "none", "--", flaky, state)
	if status != 0 {
		t.Fatalf("status %d\n%s", status, stderr)
	}
	for _, want := range []string{
		"retryq: attempt 1/5 exit=75 class=unknown next in 10ms\n",
		"retryq: attempt 2/5 exit=75 class=unknown next in 20ms\n",
		"retryq: succeeded on attempt 3/5 after ",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Count(stderr, "retryq: attempt") != 2 || !strings.Contains(stdout, "flaky: run 3: done") {
		t.Errorf("stdout %q\nstderr %s", stdout, stderr)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left behind: %v", err)
	}
}

func TestRunNonRetryableExitCode(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", "echo run >> "+runs+"\nexit ${1:-2}\n")
	tests := []struct {
		name string
		args []string
	}{
		{"deny list", []string{"--no-retry-on-exit", "2,64", "--", job, "2"}},
		{"not on allow list", []string{"--retry-on-exit", "75", "--", job, "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(runs)
			args := append([]string{"run", "--attempts", "5", "--delay", "10ms"}, tt.args...)
			status, _, stderr := runRetryq(t, dir, args...)
			if status != 2 || countLines(t, runs) != 1 {
				t.Fatalf("status %d, runs %d\n%s", status, countLines(t, runs), stderr)
			}
			if !strings.Contains(stderr, "attempt 1/5 exit=2 class=permanent not retryable") ||
				!strings.Contains(stderr, "failed after 1 attempt in ") || !strings.Contains(stderr, "(non_retryable); exit status 2") {
				t.Fatalf("stderr:\n%s", stderr)
			}
		})
	}
}

// groupAlive reports whether any live (non-zombie) process is in process
// group pgid, by reading /proc.
func groupAlive(t *testing.T, pgid int) bool {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		t.Skip("no /proc")
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process went away
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, pgrp, ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name   string
		trap   string // shell code run first
		status int
		signal string
	}{
		{"exits on SIGTERM", "", 143, "TERM"},
		{"ignores SIGTERM", "trap '' TERM\n", 137, "KILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			pids := filepath.Join(dir, "pids")
			// The attempt leaves a background child in its group and hangs.
			job := script(t, dir, "hang.sh", tt.trap+"echo $$ >> "+pids+"\nsleep 300 &\nsleep 300\n")
			// runRetryq's bound, waitLimit, is far below the leftovers'
			// 300 s: a retryq that waited for them (or for the output they
			// hold open) fails it. A tighter bound of its own failed a
			// loaded machine's run, which took 10 s.
			status, _, stderr := runRetryq(t, dir, "run", "--attempts", "2", "--delay", "10ms", "--jitter", "none",
				"--timeout", "1s", "--grace", "200ms", "--", job) // 1 s: time for the shell's trap on a loaded machine
			if status != tt.status {
				t.Fatalf("status %d, want %d\n%s", status, tt.status, stderr)
			}
			want := "attempt 1/2 timeout=1s signal=" + tt.signal + " class=transient next in 10ms"
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, "attempt 2/2 timeout=1s") {
				t.Fatalf("stderr lacks %q:\n%s", want, stderr)
			}
			b, err := os.ReadFile(pids)
			if err != nil {
				t.Fatal(err)
			}
			groups := strings.Fields(string(b))
			if len(groups) != 2 {
				t.Fatalf("attempts started: %q", groups)
			}
			for _, g := range groups {
				pgid, _ := strconv.Atoi(g)
				waitFor(t, "process group "+g+" to die", func() bool { return !groupAlive(t, pgid) })
			}
		})
	}
}

// startRetryq starts retryq and returns its stderr lines as they come.
func startRetryq(t *testing.T, dir string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := retryqCmd(t, dir, args...)
	pipe, err := cmd.StderrPipe()
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
	return cmd, lines
}

// readUntil collects lines until one contains want (or the stream ends).
func readUntil(t *testing.T, lines <-chan string, want string) []string {
	t.Helper()
	var got []string
	timeout := time.After(waitLimit)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return got
			}
			got = append(got, l)
			if strings.Contains(l, want) {
				return got
			}
		case <-timeout:
			t.Fatalf("no line with %q; got %q", want, got)
		}
	}
}

func TestRunForwardsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	ready, marker, runs := filepath.Join(dir, "ready"), filepath.Join(dir, "marker"), filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", "trap 'echo TERM > "+marker+"; exit 143' TERM\n"+
		"echo run >> "+runs+"\necho ready > "+ready+"\nwhile :; do sleep 0.05; done\n")
	cmd, lines := startRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--", job)
	waitFor(t, "the attempt to start", func() bool { _, err := os.Stat(ready); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, lines, "retryq: interrupted")
	cmd.Wait()
	if status := cmd.ProcessState.ExitCode(); status != 143 {
		t.Fatalf("status %d\n%s", status, strings.Join(out, "\n"))
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "TERM\n" {
		t.Fatalf("child did not get SIGTERM: %q %v", b, err)
	}
	if countLines(t, runs) != 1 {
		t.Fatalf("retried after SIGTERM: %d runs", countLines(t, runs))
	}
	joined := strings.Join(out, "\n")
	if !strings.Contains(joined, "attempt 1/5 exit=143 class=unknown interrupted, not retrying") ||
		!strings.Contains(joined, "interrupted by SIGTERM after 1 attempt") {
		t.Fatalf("stderr:\n%s", joined)
	}
}

func TestRunSIGINTDuringBackoffStops(t *testing.T) {
	skipIfIgnored(t, syscall.SIGINT)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", "echo run >> "+runs+"\nexit 7\n")
	cmd, lines := startRetryq(t, dir, "run", "--attempts", "5", "--delay", "1h", "--", job)
	readUntil(t, lines, "next in")
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, lines, "retryq: interrupted")
	cmd.Wait()
	if status := cmd.ProcessState.ExitCode(); status != 7 || countLines(t, runs) != 1 {
		t.Fatalf("status %d runs %d\n%q", status, countLines(t, runs), out)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the wait was not interrupted")
	}
	if !strings.Contains(out[len(out)-1], "interrupted by SIGINT after 1 attempt") {
		t.Fatalf("%q", out)
	}
}

func TestRunJSONLogAndSignalDeath(t *testing.T) {
	dir := t.TempDir()
	job := script(t, dir, "job.sh", "kill -KILL $$\n")
	status, _, stderr := runRetryq(t, dir, "run", "--attempts", "2", "--delay", "10ms", "--log-format", "json", "--", job)
	if status != 137 {
		t.Fatalf("status %d\n%s", status, stderr)
	}
	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		records = append(records, m)
	}
	if len(records) != 3 {
		t.Fatalf("records: %v", records)
	}
	first := records[0]
	for k, v := range map[string]any{"msg": "attempt", "attempt": 1.0, "max_attempts": 2.0, "exit_code": 137.0,
		"signal": "KILL", "class": "unknown", "code": "signal:KILL"} {
		if first[k] != v {
			t.Errorf("%s = %v, want %v", k, first[k], v)
		}
	}
	if d, ok := first["delay_seconds"].(float64); !ok || d <= 0 {
		t.Errorf("delay_seconds = %v", first["delay_seconds"])
	}
	if records[1]["stop"] != "max_attempts" || records[2]["msg"] != "summary" || records[2]["outcome"] != "failed" {
		t.Errorf("records: %v", records)
	}
}

func TestRunBreakerAndMissingCommand(t *testing.T) {
	dir := t.TempDir()
	status, _, stderr := runRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--breaker", "2", "--", "false")
	if status != 1 || strings.Count(stderr, "retryq: attempt") != 2 ||
		!strings.Contains(stderr, "circuit breaker open after 2 consecutive failures, not retrying") ||
		!strings.Contains(stderr, "(circuit_open); exit status 1") {
		t.Fatalf("breaker: status %d\n%s", status, stderr)
	}
	status, _, stderr = runRetryq(t, dir, "run", "--attempts", "5", "--", filepath.Join(dir, "missing"))
	if status != 127 || strings.Count(stderr, "retryq: attempt") != 1 || !strings.Contains(stderr, "class=permanent") {
		t.Fatalf("missing command: status %d\n%s", status, stderr)
	}
}

func TestRunPassesStdioAndAttemptNumber(t *testing.T) {
	dir := t.TempDir()
	job := script(t, dir, "job.sh", "read line\necho \"got $line on $RETRYQ_ATTEMPT/$RETRYQ_MAX_ATTEMPTS\"\n")
	cmd := retryqCmd(t, dir, "run", "--attempts", "3", "--", job)
	cmd.Stdin = strings.NewReader("hello\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "got hello on 1/3\n" {
		t.Fatalf("%q %v", out, err)
	}
}

// TestRunJSONLogNamesStartError: a command that cannot be started is
// logged in JSON with the reason, as the text log's error= says it: an
// exit code of 127 and code start_failed alone do not tell a missing
// program from one that is not executable.
func TestRunJSONLogNamesStartError(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	status, _, stderr := runRetryq(t, dir, "run", "--attempts", "3", "--log-format", "json", "--", missing)
	if status != 127 {
		t.Fatalf("status %d\n%s", status, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 2 {
		t.Fatalf("want an attempt and a summary:\n%s", stderr)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("not JSON: %q", lines[0])
	}
	msg, _ := first["error"].(string)
	if first["msg"] != "attempt" || first["code"] != "start_failed" || !strings.Contains(msg, missing) {
		t.Fatalf("attempt record %v: want the start error naming %s", first, missing)
	}
}

// A hangup (the terminal or SSH session closed) stops retryq like SIGINT
// and SIGTERM: it reaches the attempt's process group, which is not the
// terminal's, instead of killing retryq and leaving the attempt running.
func TestRunForwardsSIGHUP(t *testing.T) {
	checkRunForwardsStop(t, syscall.SIGHUP, "HUP", 129)
}

// An attempt killed by SIGPIPE because its output's reader went away (as
// in "retryq run -- cmd | head -1") is not retried: every further attempt
// would write into the same broken pipe, after running the command's side
// effects again.
func TestRunAttemptKilledByClosedOutputIsNotRetried(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	job := script(t, dir, "talk.sh", "echo run >> "+runs+"\nwhile :; do echo line; done\n")
	cmd := retryqCmd(t, dir, "run", "--attempts", "3", "--delay", "10ms", "--", job)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "line\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	out.Close() // the reader goes away, as head does
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("retryq did not finish:\n%s", errOut.String())
	}
	stderr := errOut.String()
	if n := countLines(t, runs); n != 1 || cmd.ProcessState.ExitCode() != 141 {
		t.Fatalf("%d attempts, status %d, want 1 attempt and 141:\n%s", n, cmd.ProcessState.ExitCode(), stderr)
	}
	if !strings.Contains(stderr, "attempt 1/3 signal=PIPE class=permanent not retryable, giving up") {
		t.Fatalf("stderr:\n%s", stderr)
	}
}
