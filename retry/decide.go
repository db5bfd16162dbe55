package retry

import "time"

// Input describes a failed attempt for [Policy.Decide].
type Input struct {
	// Attempt is the number of the attempt that just failed, 1-based.
	Attempt int
	// MaxAttempts overrides the policy's MaxAttempts when > 0.
	MaxAttempts int
	// FirstFailure is when the first attempt failed; the retry window is
	// measured from it. The zero Time means Now (this is the first failure).
	FirstFailure time.Time
	// Now is the current time.
	Now time.Time
	// PrevDelay is the delay chosen before this attempt (0 for the first),
	// used by decorrelated jitter.
	PrevDelay time.Duration
	// Class is the failure's class, usually from [Policy.Classify].
	Class Class
	// RetryAfter, when > 0, is the delay the failing side asked for.
	RetryAfter time.Duration
}

// Decision is the outcome of [Policy.Decide]: either Retry after Delay, or
// stop for the reason in Stop.
type Decision struct {
	Retry bool          // true: run another attempt after Delay
	Delay time.Duration // the wait before the next attempt; 0 when stopping
	Stop  StopReason    // why retrying stops; StopNone when Retry is true
}

// Decide is the retry decision for one failed attempt. It applies p's
// defaults (see [Policy.WithDefaults]) and does not allocate. In order:
//
//  1. a permanent class stops with StopNonRetryable;
//  2. once Attempt >= the attempt limit it stops with StopMaxAttempts;
//  3. the delay is RetryAfter capped at MaxDelay when RetryAfter > 0, and
//     otherwise the policy's jittered backoff (see [Policy.Delay]);
//  4. with a retry window, if Now+delay is later than
//     FirstFailure+RetryWindow it stops with StopRetryWindow (an attempt
//     starting exactly at the end of the window is allowed).
//
// Transient and unknown classes are retried alike. r supplies randomness for
// jitter; nil means the global source of math/rand/v2.
func (p *Policy) Decide(in Input, r Rand) Decision {
	q := p.WithDefaults()
	if in.Class == ClassPermanent {
		return Decision{Stop: StopNonRetryable}
	}
	limit := q.MaxAttempts
	if in.MaxAttempts > 0 {
		limit = in.MaxAttempts
	}
	if in.Attempt >= limit {
		return Decision{Stop: StopMaxAttempts}
	}
	var delay time.Duration
	if in.RetryAfter > 0 {
		delay = min(in.RetryAfter, q.MaxDelay)
	} else {
		delay = q.delay(in.Attempt, in.PrevDelay, r)
	}
	if q.RetryWindow > 0 {
		first := in.FirstFailure
		if first.IsZero() {
			first = in.Now
		}
		if in.Now.Add(delay).After(first.Add(q.RetryWindow)) {
			return Decision{Stop: StopRetryWindow}
		}
	}
	return Decision{Retry: true, Delay: delay}
}
