package retry

import (
	"context"
	"fmt"
	"time"
)

// AttemptInfo describes one finished attempt of [Do]: it is passed to hooks
// and kept in [ExhaustedError.Attempts].
type AttemptInfo struct {
	Number int           // 1-based attempt number
	Err    error         // the attempt's error (never nil: successes are not reported)
	Class  Class         // class after the policy's code lists
	Code   string        // error code, "" if none
	Delay  time.Duration // wait before the next attempt; 0 when stopping
	Stop   StopReason    // why retrying stops after this attempt; StopNone if it goes on
}

// Option configures [Do].
type Option func(*doConfig)

type doConfig struct {
	clock Clock
	rand  Rand
	hooks []func(AttemptInfo)
}

// WithClock makes Do read the time and wait through c instead of the
// system clock (a nil c means the system clock). The clock must not read
// the zero time.Time (year 1), which Do and [Policy.Decide] take for "no
// failure yet": start a fake clock at any other instant.
func WithClock(c Clock) Option {
	return func(o *doConfig) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithRand makes Do draw jitter from r (which must be safe for use by the
// calling goroutine) instead of math/rand/v2's global source.
func WithRand(r Rand) Option { return func(o *doConfig) { o.rand = r } }

// WithHook adds a function called after every failed attempt, once the
// decision about the next one is made. Hooks run on Do's goroutine; Do
// waits for them. Several hooks run in the order given; a nil h is ignored.
func WithHook(h func(AttemptInfo)) Option {
	return func(o *doConfig) {
		if h != nil {
			o.hooks = append(o.hooks, h)
		}
	}
}

// MaxHistory is the most failed attempts an [ExhaustedError] keeps: the
// first one and the latest MaxHistory-1, so that a long retry loop does not
// grow without bound. Hooks see every attempt.
const MaxHistory = 1000

// ExhaustedError is returned by [Do] when it gives up: on a permanent
// error, when attempts or the retry window run out, or when the context
// ends. It wraps the last attempt's error (and the context's error when
// Stop is StopCanceled), so errors.Is and errors.As see both.
type ExhaustedError struct {
	// Attempts are the failed attempts, in order: every one when there
	// were at most MaxHistory, else the first and the latest MaxHistory-1.
	Attempts []AttemptInfo
	Omitted  int        // failed attempts left out of Attempts (after the first)
	Stop     StopReason // why Do stopped
	Err      error      // the last attempt's error
	Ctx      error      // ctx.Err() when Stop is StopCanceled, else nil
}

// Error describes the stop and the last error.
func (e *ExhaustedError) Error() string {
	n := len(e.Attempts) + e.Omitted
	noun := "attempts"
	if n == 1 {
		noun = "attempt"
	}
	if e.Stop == StopCanceled && e.Ctx != nil {
		return fmt.Sprintf("retry: stopped after %d %s (%v): %v", n, noun, e.Ctx, e.Err)
	}
	return fmt.Sprintf("retry: gave up after %d %s (%s): %v", n, noun, e.Stop, e.Err)
}

// Unwrap returns the last attempt's error and, when the context ended the
// loop, the context's error.
func (e *ExhaustedError) Unwrap() []error {
	if e.Ctx != nil {
		return []error{e.Err, e.Ctx}
	}
	return []error{e.Err}
}

// Do calls op until it succeeds, fails permanently (see [Policy.Classify]),
// runs out of attempts or retry window, or ctx ends, waiting between
// attempts as [Policy.Decide] says. Waits end early when ctx ends.
//
// Do returns nil on success, the validation error if p is invalid (op is
// not called), ctx.Err() if ctx has ended before the first attempt, and an
// [*ExhaustedError] otherwise.
func Do(ctx context.Context, op func(ctx context.Context) error, p Policy, opts ...Option) error {
	if err := p.Validate(); err != nil {
		return err
	}
	cfg := doConfig{clock: SystemClock}
	for _, o := range opts {
		o(&cfg)
	}
	q := p.WithDefaults()
	if err := ctx.Err(); err != nil {
		return err
	}
	var (
		history history
		first   time.Time
		prev    time.Duration
	)
	for n := 1; ; n++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		now := cfg.clock.Now()
		if first.IsZero() {
			first = now
		}
		class, code, retryAfter := q.Classify(err)
		d := q.Decide(Input{Attempt: n, FirstFailure: first, Now: now, PrevDelay: prev, Class: class, RetryAfter: retryAfter}, cfg.rand)
		ctxErr := ctx.Err()
		if ctxErr != nil {
			d = Decision{Stop: StopCanceled}
		}
		info := AttemptInfo{Number: n, Err: err, Class: class, Code: code, Delay: d.Delay, Stop: d.Stop}
		history.add(info)
		for _, h := range cfg.hooks {
			h(info)
		}
		if !d.Retry {
			return history.exhausted(d.Stop, err, ctxErr)
		}
		if err := wait(ctx, cfg.clock, d.Delay); err != nil {
			// The hooks saw the attempt as going on; the history records
			// how it ended.
			last := &history.kept[len(history.kept)-1]
			last.Stop, last.Delay = StopCanceled, 0
			return history.exhausted(StopCanceled, info.Err, err)
		}
		prev = d.Delay
	}
}

// history collects Do's failed attempts in at most 2*MaxHistory entries:
// the first attempt and the latest ones, counting those dropped between.
type history struct {
	kept    []AttemptInfo
	omitted int
}

// add appends a, first dropping all but the first and the latest
// MaxHistory-1 attempts once 2*MaxHistory are kept (amortized O(1)).
func (h *history) add(a AttemptInfo) {
	if len(h.kept) == 2*MaxHistory {
		h.trim()
	}
	h.kept = append(h.kept, a)
}

// trim keeps the first attempt and the latest MaxHistory-1.
func (h *history) trim() {
	if len(h.kept) <= MaxHistory {
		return
	}
	drop := len(h.kept) - MaxHistory
	n := 1 + copy(h.kept[1:], h.kept[1+drop:])
	clear(h.kept[n:]) // let the dropped errors be collected
	h.kept = h.kept[:n]
	h.omitted += drop
}

// exhausted returns the final error with the trimmed history.
func (h *history) exhausted(stop StopReason, err, ctxErr error) *ExhaustedError {
	h.trim()
	return &ExhaustedError{Attempts: h.kept, Omitted: h.omitted, Stop: stop, Err: err, Ctx: ctxErr}
}

// wait sleeps d on clock, returning ctx.Err() if ctx ends first or has
// ended by the time the timer fires.
func wait(ctx context.Context, clock Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C():
		// When both are ready, select picks at random: an ended context
		// must still stop Do rather than start an attempt.
		return ctx.Err()
	}
}
