package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/retry"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run a command, retrying it on failure per a retry policy",
		run:     runCommand,
	})
}

const runUsage = `Usage: retryq run [flags] -- COMMAND [ARGS...]

Runs COMMAND and retries it per a retry policy until it exits 0, fails in a
way that is not retried, or attempts or time run out. Standard input, output
and error pass through (standard input is shared by all attempts: what one
attempt reads of a pipe or a file is gone for the next).

Each attempt runs in its own process group with RETRYQ_ATTEMPT and
RETRYQ_MAX_ATTEMPTS in its environment. SIGINT, SIGTERM, SIGQUIT and SIGHUP
sent to retryq are forwarded to the running attempt's process group and stop
retrying (retryq exits with the attempt's status); one that retryq was started
with ignored (as nohup ignores SIGHUP) stays ignored, by retryq and by its
attempts. SIGTSTP (Ctrl-Z) stops the attempt's process group, then retryq;
SIGCONT (fg, bg) continues both; --timeout and the delay between attempts
count the time stopped. When standard input, output or error is retryq's
controlling terminal, attempts run in retryq's own process group instead, so
that they can read the terminal and get its Ctrl-C, Ctrl-\ and Ctrl-Z (and the
shell's SIGCONT) themselves; signals and --timeout then reach only the
attempt's own process, not the processes it started, and a SIGINT or SIGQUIT
while retryq is the terminal's foreground job is taken for the terminal's
Ctrl-C or Ctrl-\, which the attempt got too: it stops retrying but is not sent
to the attempt a second time. Every attempt is logged to standard error,
followed by a summary line. The exit status is the last attempt's (128+N for
death by signal N; 127 if COMMAND cannot be found, 126 if it cannot be run).
An attempt stopped by --timeout has failed even if it exits 0 on SIGTERM; when
the last attempt timed out and still exited 0, the status is 124, as with
timeout(1) (one killed by the timeout's SIGTERM or SIGKILL gives 143 or 137,
by the rule above).

Exit codes are matched as codes "exit:N": --retry-on-exit 1,75 makes only
exits 1 and 75 (and timed-out attempts) retryable; --no-retry-on-exit 2,64
makes exits 2 and 64 final. A code 128+N also matches death by signal N,
whose status it is: --no-retry-on-exit 137 makes a SIGKILL final. Without
either list every failure is retried, except death by SIGPIPE once retryq's
standard output or error has no reader left (as in "retryq run -- COMMAND |
head -1"): that is final.

Durations take Go syntax (500ms, 30s, 1m30s) or seconds (0.5, 30).
`

// runOptions is the parsed command line of "retryq run".
type runOptions struct {
	policy    retry.Policy
	timeout   time.Duration // per attempt; 0 = none
	grace     time.Duration // SIGTERM to SIGKILL on timeout
	breaker   int           // open after this many consecutive failures; 0 = off
	logFormat string
	argv      []string
}

// flagForField maps policy JSON fields to the flags that set them, so
// validation errors name the flag.
var flagForField = map[string]string{
	"backoff":               "--backoff",
	"initial_delay_seconds": "--delay",
	"multiplier":            "--multiplier",
	"max_delay_seconds":     "--max-delay",
	"max_doublings":         "--max-doublings",
	"jitter":                "--jitter",
	"jitter_fraction":       "--jitter-fraction",
	"max_attempts":          "--attempts",
	"retry_window_seconds":  "--max-time",
	"retry_on":              "--retry-on-exit",
	"no_retry_on":           "--no-retry-on-exit",
}

// parseRun parses and checks the command line. It returns nil and the
// exit status when nothing should run (help, or a usage error).
func parseRun(env *Env, args []string) (*runOptions, int) {
	fs := newFlagSet("run", runUsage)
	def := retry.DefaultPolicy()
	var (
		o                  = runOptions{grace: 5 * time.Second}
		backoff, jitter    string
		retryOn, noRetryOn []int
		p                  retry.Policy
	)
	intFlag(fs, &p.MaxAttempts, "attempts", def.MaxAttempts, "maximum number of `attempts`, the first included")
	fs.StringVar(&backoff, "backoff", string(def.Backoff), "backoff `strategy`: fixed, linear, exponential or decorrelated")
	fs.Var(durationValue{&p.InitialDelay}, "delay", "initial `delay` between attempts (default 1s)")
	fs.Var(durationValue{&p.MaxDelay}, "max-delay", "`cap` on any delay (default 5m0s)")
	fs.Float64Var(&p.Multiplier, "multiplier", def.Multiplier, "growth `factor` of exponential backoff")
	intFlag(fs, &p.MaxDoublings, "max-doublings", 0, "grow exponentially `N` times, then linearly (0 = no limit)")
	fs.StringVar(&jitter, "jitter", string(def.Jitter), "jitter `mode`: none, proportional, full or equal")
	fs.Float64Var(&p.JitterFraction, "jitter-fraction", def.JitterFraction, "± `fraction` of proportional jitter")
	fs.Var(durationValue{&p.RetryWindow}, "max-time", "stop retrying when the next attempt would start more than `duration` after the first failure (0 = no limit)")
	fs.Var(exitCodesValue{&retryOn}, "retry-on-exit", "retry only these exit `codes`, e.g. 1,75 (timeouts are still retried)")
	fs.Var(exitCodesValue{&noRetryOn}, "no-retry-on-exit", "never retry these exit `codes`, e.g. 2,64")
	fs.Var(durationValue{&o.timeout}, "timeout", "time `limit` per attempt; the attempt's process group gets SIGTERM, then SIGKILL after --grace (0 = none)")
	fs.Var(durationValue{&o.grace}, "grace", "`time` between SIGTERM and SIGKILL for a timed-out attempt")
	intFlag(fs, &o.breaker, "breaker", 0, "circuit breaker: stop retrying after `N` consecutive failures, saying so (0 = off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "attempt log `format` on stderr: text or json")
	if status, ok := parseFlags(env, fs, args); !ok {
		return nil, status
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if msg := checkRunFlags(&o, &p, set, backoff, jitter, retryOn, noRetryOn); msg != "" {
		return nil, usageError(env, "run", msg)
	}
	if err := p.Validate(); err != nil {
		return nil, usageError(env, "run", policyErrorMessage(err))
	}
	o.policy = p
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return nil, usageError(env, "run", "missing COMMAND (usage: retryq run [flags] -- COMMAND [ARGS...])")
	}
	return &o, exitOK
}

// checkRunFlags checks what the policy cannot: flag-level ranges, the
// enumerations and the exit-code lists. It fills in p's enums and code
// lists and returns a message naming the flag, or "".
func checkRunFlags(o *runOptions, p *retry.Policy, set map[string]bool, backoff, jitter string, retryOn, noRetryOn []int) string {
	p.Backoff, p.Jitter = retry.Backoff(backoff), retry.Jitter(jitter)
	switch {
	case !slices.Contains([]string{"fixed", "linear", "exponential", "decorrelated"}, backoff):
		return fmt.Sprintf("--backoff: unknown strategy %q (want fixed, linear, exponential or decorrelated)", backoff)
	case !slices.Contains([]string{"none", "proportional", "full", "equal"}, jitter):
		return fmt.Sprintf("--jitter: unknown mode %q (want none, proportional, full or equal)", jitter)
	case p.MaxAttempts < 1:
		return fmt.Sprintf("--attempts: must be >= 1 (got %d)", p.MaxAttempts)
	case set["delay"] && p.InitialDelay <= 0:
		return fmt.Sprintf("--delay: must be > 0 (got %v); use e.g. 1ms for a near-immediate retry", p.InitialDelay)
	case set["max-delay"] && p.MaxDelay <= 0:
		return fmt.Sprintf("--max-delay: must be > 0 (got %v)", p.MaxDelay)
	case math.IsNaN(p.Multiplier) || p.Multiplier < 1:
		return fmt.Sprintf("--multiplier: must be >= 1 (got %g)", p.Multiplier)
	case p.JitterFraction <= 0 || p.JitterFraction > 1 || math.IsNaN(p.JitterFraction):
		return fmt.Sprintf("--jitter-fraction: must be > 0 and <= 1 (got %g)", p.JitterFraction)
	case o.timeout < 0:
		return fmt.Sprintf("--timeout: must be >= 0 (got %v)", o.timeout)
	case o.grace <= 0:
		return fmt.Sprintf("--grace: must be > 0 (got %v)", o.grace)
	case o.breaker < 0:
		return fmt.Sprintf("--breaker: must be >= 0 (got %d)", o.breaker)
	case o.logFormat != "text" && o.logFormat != "json":
		return fmt.Sprintf("--log-format: unknown format %q (want text or json)", o.logFormat)
	}
	for _, c := range retryOn {
		if slices.Contains(noRetryOn, c) {
			return fmt.Sprintf("--retry-on-exit: exit code %d is also in --no-retry-on-exit", c)
		}
	}
	for _, c := range retryOn {
		p.RetryOn = appendExitCodes(p.RetryOn, c)
	}
	if len(p.RetryOn) > 0 {
		p.RetryOn = append(p.RetryOn, retry.CodeTimeout) // timed-out attempts stay retryable
	}
	for _, c := range noRetryOn {
		p.NoRetryOn = appendExitCodes(p.NoRetryOn, c)
	}
	return ""
}

// exitCode is the error code of an attempt that exited with status n.
func exitCode(n int) string { return "exit:" + strconv.Itoa(n) }

// appendExitCodes appends to codes the error codes of the attempts whose
// status is n: those that exited with n and, for n = 128+N, those killed
// by signal N, whose status retryq reports as n too.
func appendExitCodes(codes []string, n int) []string {
	codes = append(codes, exitCode(n))
	if c, ok := signalCode(n); ok {
		codes = append(codes, c)
	}
	return codes
}

// policyErrorMessage rewrites a policy validation error in terms of flags.
func policyErrorMessage(err error) string {
	var fe *retry.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	pairs := make([]string, 0, 2*len(flagForField))
	for field, flagName := range flagForField {
		pairs = append(pairs, field, flagName)
	}
	reason := strings.NewReplacer(pairs...).Replace(fe.Reason)
	if f, ok := flagForField[fe.Field]; ok {
		return f + ": " + reason
	}
	return err.Error()
}

func runCommand(ctx context.Context, env *Env, args []string) int {
	o, status := parseRun(env, args)
	if o == nil {
		return status
	}
	return newRunner(env, o).run(ctx)
}
