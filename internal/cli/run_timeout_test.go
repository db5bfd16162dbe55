//go:build linux

package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// A timed-out attempt whose command handles SIGTERM by exiting 0 must not
// count as a success: it ran past --timeout and was killed for it.
//
// The tests of this file give attempts 1 s: their shell must install its
// trap before the timeout, which a loaded machine can delay past 300 ms.
func TestRunTimedOutAttemptExitingZeroIsNotSuccess(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	job := script(t, dir, "job.sh", "trap 'exit 0' TERM\necho run >> "+runs+"\nwhile :; do sleep 0.05; done\n")
	status, _, stderr := runRetryq(t, dir, "run", "--attempts", "2", "--delay", "10ms", "--jitter", "none",
		"--timeout", "1s", "--grace", "2s", "--", job)
	if status != timedOutStatus || strings.Contains(stderr, "succeeded") || countLines(t, runs) != 2 {
		t.Fatalf("timed-out attempts treated as success: status %d, runs %d\n%s", status, countLines(t, runs), stderr)
	}
}

// A timed-out attempt that exits with a status (not by a signal) is logged
// as "timeout=... exit=N", not "timeout=... signal=exit=N".
func TestRunTimedOutAttemptExitLogLine(t *testing.T) {
	dir := t.TempDir()
	job := script(t, dir, "job.sh", "trap 'exit 3' TERM\nwhile :; do sleep 0.05; done\n")
	_, _, stderr := runRetryq(t, dir, "run", "--attempts", "2", "--delay", "10ms", "--jitter", "none",
		"--timeout", "1s", "--grace", "2s", "--", job)
	if strings.Contains(stderr, "signal=exit=") || !strings.Contains(stderr, "attempt 1/2 timeout=1s exit=3 class=transient next in 10ms") {
		t.Fatalf("malformed attempt line:\n%s", stderr)
	}
}

// A timed-out attempt's JSON record states the limit it ran into, as the
// text line's timeout= does.
func TestRunJSONLogStatesTimeout(t *testing.T) {
	dir := t.TempDir()
	job := script(t, dir, "job.sh", "trap 'exit 3' TERM\nwhile :; do sleep 0.05; done\n")
	_, _, stderr := runRetryq(t, dir, "run", "--attempts", "1", "--timeout", "1s", "--grace", "2s", "--log-format", "json", "--", job)
	var m map[string]any
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "{") { // not the shell's own messages
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not JSON: %q", l)
			}
			break
		}
	}
	if m["msg"] != "attempt" || m["timed_out"] != true || m["timeout_seconds"] != 1.0 || m["exit_code"] != 3.0 {
		t.Fatalf("attempt record %v: want timed_out, timeout_seconds 1 and exit_code 3", m)
	}
}
