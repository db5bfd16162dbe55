package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/retryq/retryq/retry"
)

// runLog writes the per-attempt lines and the summary of "retryq run" to
// stderr, as text for people or JSON (one object per line) for machines.
type runLog struct {
	w           io.Writer
	json        *slog.Logger // nil for text
	maxAttempts int
}

func newRunLog(w io.Writer, format string, maxAttempts int) *runLog {
	l := &runLog{w: w, maxAttempts: maxAttempts}
	if format == "json" {
		l.json = slog.New(slog.NewJSONHandler(w, nil))
	}
	return l
}

// summary is the end of a run.
type summary struct {
	attempts int
	status   int
	stop     retry.StopReason
	elapsed  time.Duration
	signal   os.Signal // the signal that stopped retryq, if any
	breaker  int       // consecutive failures that opened the breaker; 0 if it did not
}

// attempt logs one failed attempt and what happens next, e.g.
//
//	retryq: attempt 2/5 exit=1 class=transient next in 2.1s
func (l *runLog) attempt(a retry.AttemptInfo, o outcome, timeout time.Duration, breakerOpenedAt int) {
	if l.json != nil {
		attrs := []any{
			"attempt", a.Number, "max_attempts", l.maxAttempts, "exit_code", o.status,
			"class", a.Class.String(), "code", a.Code, "delay_seconds", a.Delay.Seconds(),
			"elapsed_seconds", o.elapsed.Seconds(),
		}
		if o.startErr != nil {
			// Why the command did not start, as the text log's error=.
			attrs = append(attrs, "error", o.startErr.Error())
		}
		if o.signal != "" {
			attrs = append(attrs, "signal", o.signal)
		}
		if o.timedOut {
			attrs = append(attrs, "timed_out", true, "timeout_seconds", timeout.Seconds())
		}
		switch {
		case breakerOpenedAt > 0:
			// The breaker stopped the run, as the summary says.
			attrs = append(attrs, "stop", "circuit_open", "breaker_open", true)
		case a.Stop != retry.StopNone:
			attrs = append(attrs, "stop", string(a.Stop))
		}
		l.json.Info("attempt", attrs...)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "retryq: attempt %d/%d ", a.Number, l.maxAttempts)
	switch {
	case o.startErr != nil:
		fmt.Fprintf(&b, "error=%q", o.startErr.Error())
	case o.timedOut && o.signal != "":
		fmt.Fprintf(&b, "timeout=%s signal=%s", fmtDuration(timeout), o.signal)
	case o.timedOut:
		fmt.Fprintf(&b, "timeout=%s exit=%d", fmtDuration(timeout), o.status)
	case o.signal != "":
		fmt.Fprintf(&b, "signal=%s", o.signal)
	default:
		fmt.Fprintf(&b, "exit=%d", o.status)
	}
	fmt.Fprintf(&b, " class=%s ", a.Class)
	switch {
	case breakerOpenedAt > 0:
		fmt.Fprintf(&b, "circuit breaker open after %d consecutive failures, not retrying", breakerOpenedAt)
	case a.Stop == retry.StopNone:
		fmt.Fprintf(&b, "next in %s", fmtDuration(a.Delay))
	default:
		b.WriteString(stopPhrase(a.Stop))
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(l.w, b.String())
}

func stopPhrase(s retry.StopReason) string {
	switch s {
	case retry.StopMaxAttempts:
		return "no attempts left"
	case retry.StopNonRetryable:
		return "not retryable, giving up"
	case retry.StopRetryWindow:
		return "next attempt would pass --max-time, giving up"
	case retry.StopCanceled:
		return "interrupted, not retrying"
	default:
		return string(s)
	}
}

// summary logs the final line, e.g.
//
//	retryq: succeeded on attempt 3/5 after 0.62s
//	retryq: failed after 5 attempts in 12.3s (max_attempts); exit status 1
func (l *runLog) summary(s summary) {
	outcome := "failed"
	switch {
	case s.stop == retry.StopNone && s.status == 0:
		outcome = "succeeded"
	case s.signal != nil:
		outcome = "interrupted"
	}
	stop := string(s.stop)
	if s.breaker > 0 {
		stop = "circuit_open"
	}
	if l.json != nil {
		attrs := []any{"outcome", outcome, "attempts", s.attempts, "max_attempts", l.maxAttempts,
			"exit_code", s.status, "elapsed_seconds", s.elapsed.Seconds()}
		if stop != "" {
			attrs = append(attrs, "stop", stop)
		}
		if s.signal != nil {
			attrs = append(attrs, "signal", signalName(s.signal))
		}
		l.json.Info("summary", attrs...)
		return
	}
	noun := "attempts"
	if s.attempts == 1 {
		noun = "attempt"
	}
	switch outcome {
	case "succeeded":
		fmt.Fprintf(l.w, "retryq: succeeded on attempt %d/%d after %s\n", s.attempts, l.maxAttempts, fmtDuration(s.elapsed))
	case "interrupted":
		fmt.Fprintf(l.w, "retryq: interrupted by SIG%s after %d %s in %s; exit status %d\n",
			signalName(s.signal), s.attempts, noun, fmtDuration(s.elapsed), s.status)
	default:
		fmt.Fprintf(l.w, "retryq: failed after %d %s in %s (%s); exit status %d\n",
			s.attempts, noun, fmtDuration(s.elapsed), stop, s.status)
	}
}

// fmtDuration rounds d for people: 2.1s, 200ms, 1m30s.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	default:
		return d.String()
	}
}
