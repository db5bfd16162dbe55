package cli

import (
	"io"
	"math/rand/v2"
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

// FuzzRunFlags: "retryq run" with arbitrary policy flag values either
// refuses them with a message naming a flag, or builds a policy whose
// delays stay within zero and its cap.
func FuzzRunFlags(f *testing.F) {
	for _, s := range [][6]string{
		{"1s", "5m", "2", "0", "0.25", "0"},
		{"10m", "", "", "", "", ""},
		{"0.000000001", "1e-9", "1e308", "1000000", "1", "1h"},
		{"-1", "0", "NaN", "-1", "0", "-1s"},
		{"9223372036", "", "1.0000001", "63", "1e-300", "292y"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], "exponential")
	}
	f.Fuzz(func(t *testing.T, delay, maxDelay, multiplier, doublings, fraction, maxTime, backoff string) {
		args := []string{"--backoff=" + backoff}
		for _, fl := range [][2]string{{"delay", delay}, {"max-delay", maxDelay}, {"multiplier", multiplier},
			{"max-doublings", doublings}, {"jitter-fraction", fraction}, {"max-time", maxTime}} {
			if fl[1] != "" {
				args = append(args, "--"+fl[0]+"="+fl[1])
			}
		}
		var errOut strings.Builder
		env := &Env{Stdout: io.Discard, Stderr: &errOut}
		o, status := parseRun(env, append(args, "--", "true"))
		if o == nil {
			if status != exitUsage || !strings.HasPrefix(errOut.String(), "retryq run: ") ||
				!strings.Contains(strings.SplitN(errOut.String(), "\n", 2)[0], "--") {
				t.Fatalf("%q: status %d, stderr %q", args, status, errOut.String())
			}
			return
		}
		q := o.policy.WithDefaults()
		r := rand.New(rand.NewPCG(1, 2))
		prev := time.Duration(0)
		for n := 1; n <= 70; n++ {
			d := q.Decide(retry.Input{Attempt: n, MaxAttempts: 100, Now: time.Unix(0, 0), PrevDelay: prev, Class: retry.ClassTransient}, r)
			if d.Delay < 0 || d.Delay > q.MaxDelay {
				t.Fatalf("%q: attempt %d: delay %v outside [0, %v]", args, n, d.Delay, q.MaxDelay)
			}
			prev = d.Delay
		}
	})
}
