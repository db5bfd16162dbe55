//go:build linux

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// --breaker stops retrying only where retrying would have gone on: an
// attempt that fails permanently, is the last one, or is interrupted ends
// the run for that reason, and the log says so instead of blaming the
// breaker.
func TestRunBreakerDoesNotRelabelOtherStops(t *testing.T) {
	dir := t.TempDir()
	job := script(t, dir, "job.sh", "exit ${1:-1}\n")
	tests := []struct {
		name, want, line string
		args             []string
	}{
		{"non-retryable exit", "(non_retryable); exit status 2", "attempt 1/5 exit=2 class=permanent not retryable, giving up",
			[]string{"--attempts", "5", "--breaker", "1", "--no-retry-on-exit", "2", "--", job, "2"}},
		{"missing command", "(non_retryable); exit status 127", "class=permanent not retryable, giving up",
			[]string{"--attempts", "5", "--breaker", "1", "--", filepath.Join(dir, "missing")}},
		{"last attempt", "(max_attempts); exit status 1", "attempt 2/2 exit=1 class=unknown no attempts left",
			[]string{"--attempts", "2", "--delay", "10ms", "--breaker", "2", "--", job}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, stderr := runRetryq(t, dir, append([]string{"run"}, tt.args...)...)
			if strings.Contains(stderr, "circuit") || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, tt.line) {
				t.Fatalf("want %q and %q, without the breaker:\n%s", tt.line, tt.want, stderr)
			}
		})
	}
}

// An attempt killed because retryq itself was interrupted is not a failure
// of the command for --breaker: the run stops as interrupted ("canceled").
func TestRunBreakerIgnoresInterruptedAttempt(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	job := script(t, dir, "job.sh", "trap 'exit 143' TERM\necho ready > "+ready+"\nwhile :; do sleep 0.05; done\n")
	cmd, lines := startRetryq(t, dir, "run", "--attempts", "5", "--breaker", "1", "--log-format", "json", "--", job)
	waitFor(t, "the attempt to start", func() bool { _, err := os.Stat(ready); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, lines, `"msg":"summary"`)
	cmd.Wait()
	var records []map[string]any
	for _, l := range out {
		if !strings.HasPrefix(l, "{") {
			continue // the job's own stderr
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		records = append(records, m)
	}
	if len(records) != 2 || records[0]["stop"] != "canceled" || records[0]["breaker_open"] != nil ||
		records[1]["stop"] != "canceled" || records[1]["outcome"] != "interrupted" {
		t.Fatalf("records: %v", records)
	}
}

// The attempt at which --breaker opens is logged with its own class (the
// breaker, not the failure, is what stops the run) and, in JSON, with the
// stop the summary gives, circuit_open, not as a non-retryable failure.
func TestRunBreakerOpenAttemptKeepsItsClass(t *testing.T) {
	dir := t.TempDir()
	_, _, stderr := runRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--breaker", "2", "--", "false")
	if !strings.Contains(stderr, "attempt 2/5 exit=1 class=unknown circuit breaker open after 2 consecutive failures") {
		t.Errorf("text log:\n%s", stderr)
	}
	_, _, stderr = runRetryq(t, dir, "run", "--attempts", "5", "--delay", "10ms", "--breaker", "2", "--log-format", "json", "--", "false")
	var records []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		records = append(records, m)
	}
	if len(records) != 3 {
		t.Fatalf("records: %v", records)
	}
	open, sum := records[1], records[2]
	if open["class"] != "unknown" || open["stop"] != "circuit_open" || open["breaker_open"] != true || sum["stop"] != "circuit_open" {
		t.Errorf("breaker's attempt %v, summary %v: want class unknown and stop circuit_open", open, sum)
	}
}
