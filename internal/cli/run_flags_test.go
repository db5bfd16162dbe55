package cli

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "1m30s": 90 * time.Second, "0.5": 500 * time.Millisecond,
		"2": 2 * time.Second, "0": 0, "250ms": 250 * time.Millisecond, "-1": -time.Second,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "1e300", "NaN", "inf", "5 s", "1e-12", "-1e-10"} {
		if _, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) succeeded", bad)
		}
	}
}

func TestParseRunBuildsPolicy(t *testing.T) {
	env := &Env{Stdout: io.Discard, Stderr: io.Discard}
	o, status := parseRun(env, strings.Fields(
		"--attempts 3 --backoff linear --delay 0.5 --max-delay 1m --multiplier 3 --max-doublings 2 "+
			"--jitter full --jitter-fraction 0.1 --max-time 90s --retry-on-exit 1,75 --retry-on-exit 9 "+
			"--no-retry-on-exit 2 --timeout 10s --grace 1s --breaker 4 --log-format json -- ./job.sh --x"))
	if o == nil {
		t.Fatalf("status %d", status)
	}
	want := retry.Policy{
		Backoff: retry.BackoffLinear, InitialDelay: 500 * time.Millisecond, Multiplier: 3,
		MaxDelay: time.Minute, MaxDoublings: 2, Jitter: retry.JitterFull, JitterFraction: 0.1,
		MaxAttempts: 3, RetryWindow: 90 * time.Second,
		RetryOn:   []string{"exit:1", "exit:75", "exit:9", "timeout"},
		NoRetryOn: []string{"exit:2"},
	}
	if !reflect.DeepEqual(o.policy, want) {
		t.Errorf("policy\n%+v\nwant\n%+v", o.policy, want)
	}
	if o.timeout != 10*time.Second || o.grace != time.Second || o.breaker != 4 || o.logFormat != "json" ||
		!reflect.DeepEqual(o.argv, []string{"./job.sh", "--x"}) {
		t.Errorf("options %+v", o)
	}
}

func TestParseRunRejectsBeforeRunning(t *testing.T) {
	tests := []struct{ args, want string }{
		{"--attempts 0 -- true", "--attempts: must be >= 1"},
		{"--backoff quadratic -- true", "--backoff: unknown strategy"},
		{"--jitter some -- true", "--jitter: unknown mode"},
		{"--delay 0 -- true", "--delay: must be > 0"},
		{"--delay soon -- true", `invalid value "soon" for flag --delay: want a duration`},
		{"--max-delay 0.5 -- true", "--max-delay: must be >= --delay (got 0.5 < 1)"},
		{"--max-delay 0 -- true", "--max-delay: must be > 0"},
		{"--multiplier 0.5 -- true", "--multiplier: must be >= 1"},
		{"--max-doublings -1 -- true", "--max-doublings: must be >= 0"},
		{"--jitter-fraction 2 -- true", "--jitter-fraction: must be > 0 and <= 1"},
		{"--max-time -5s -- true", "--max-time: must be >= 0"},
		{"--retry-on-exit 300 -- true", `invalid value "300" for flag --retry-on-exit: want exit codes`},
		{"--retry-on-exit 2 --no-retry-on-exit 2 -- true", "--retry-on-exit: exit code 2 is also in --no-retry-on-exit"},
		{"--timeout -1s -- true", "--timeout: must be >= 0"},
		{"--grace 0 -- true", "--grace: must be > 0"},
		{"--breaker -1 -- true", "--breaker: must be >= 0"},
		{"--log-format xml -- true", "--log-format: unknown format"},
		{"--nope -- true", "flag provided but not defined: --nope"},
		{"--attempts 3", "missing COMMAND"},
	}
	for _, tt := range tests {
		status, stdout, stderr := runMain(append([]string{"run"}, strings.Fields(tt.args)...)...)
		if status != 2 || stdout != "" || !strings.HasPrefix(stderr, "retryq run: "+tt.want) {
			t.Errorf("retryq run %s: status %d, stderr %q; want %q", tt.args, status, stderr, tt.want)
		}
	}
}
