package retry

import "time"

// Backoff names a strategy for growing the delay between attempts.
type Backoff string

// The backoff strategies. See [Policy] for how each computes its delay.
const (
	// BackoffFixed waits InitialDelay before every retry.
	BackoffFixed Backoff = "fixed"
	// BackoffLinear waits InitialDelay × n after the n-th failed attempt.
	BackoffLinear Backoff = "linear"
	// BackoffExponential waits InitialDelay × Multiplier^(n-1) after the
	// n-th failed attempt; with MaxDoublings > 0 the growth turns linear
	// after MaxDoublings steps.
	BackoffExponential Backoff = "exponential"
	// BackoffDecorrelated picks a random delay between InitialDelay and
	// three times the previous delay ("decorrelated jitter"). The Jitter
	// setting is ignored for this strategy: it is already randomized.
	BackoffDecorrelated Backoff = "decorrelated"
)

// Jitter names a way of randomizing a computed delay so that many clients
// failing together do not retry together.
type Jitter string

// The jitter modes. The result is always clamped to [0, MaxDelay].
const (
	// JitterNone uses the computed delay as is.
	JitterNone Jitter = "none"
	// JitterProportional spreads the delay uniformly over
	// delay × (1 ± JitterFraction).
	JitterProportional Jitter = "proportional"
	// JitterFull picks uniformly from [0, delay].
	JitterFull Jitter = "full"
	// JitterEqual picks uniformly from [delay/2, delay].
	JitterEqual Jitter = "equal"
)

// Policy describes how a failing operation is retried. A Policy is plain
// data: its JSON form is part of retryq's public API (see
// [Policy.MarshalJSON] for the field names).
//
// A zero field means "use the default" (see [DefaultPolicy] and
// [Policy.WithDefaults]); MaxDoublings and RetryWindow default to 0, which
// means no limit.
//
// With n the number of the attempt that just failed (1 for the first
// attempt), the delay before the next attempt is:
//
//	fixed:        InitialDelay
//	linear:       InitialDelay × n
//	exponential:  InitialDelay × Multiplier^(n-1)
//	decorrelated: random in [InitialDelay, 3 × previous delay]
//
// With MaxDoublings = k > 0, exponential growth stops after k steps and
// continues linearly, adding the delay reached after the k-th step at every
// further step (as Google Cloud Tasks does): InitialDelay 10s, Multiplier 2,
// MaxDoublings 3 and MaxDelay 300s give 10s, 20s, 40s, 80s, 160s, 240s,
// 300s, 300s, …
//
// Every delay is capped at MaxDelay, then jittered (see [Jitter]) and
// clamped to [0, MaxDelay] again.
type Policy struct {
	// Backoff is the strategy; default exponential.
	Backoff Backoff
	// InitialDelay is the first delay and the base of every strategy;
	// default 1s.
	InitialDelay time.Duration
	// Multiplier is the growth factor of exponential backoff; default 2.
	Multiplier float64
	// MaxDelay caps every delay, including server-requested ones
	// (Retry-After); default 300s, or InitialDelay when that is larger.
	MaxDelay time.Duration
	// MaxDoublings, when > 0, turns exponential growth linear after that
	// many steps; 0 means no limit.
	MaxDoublings int
	// Jitter randomizes each delay; default proportional.
	Jitter Jitter
	// JitterFraction is the ± fraction of proportional jitter, in (0, 1];
	// default 0.25.
	JitterFraction float64
	// MaxAttempts counts every attempt including the first (3 means one
	// try and two retries); default 5.
	MaxAttempts int
	// RetryWindow, when > 0, ends retrying once the next attempt would
	// start later than RetryWindow after the first failure; 0 means no
	// limit.
	RetryWindow time.Duration
	// RetryOn, when not empty, is an allow list of error codes: errors
	// whose code is listed are retried, all others are permanent.
	RetryOn []string
	// NoRetryOn is a deny list of error codes that are never retried. It
	// wins over RetryOn.
	NoRetryOn []string
}

// Default values used by [DefaultPolicy] and [Policy.WithDefaults].
const (
	DefaultBackoff        = BackoffExponential
	DefaultInitialDelay   = time.Second
	DefaultMultiplier     = 2.0
	DefaultMaxDelay       = 300 * time.Second
	DefaultJitter         = JitterProportional
	DefaultJitterFraction = 0.25
	DefaultMaxAttempts    = 5
)

// DefaultPolicy returns the documented defaults: exponential backoff from
// 1s with multiplier 2, capped at 300s, proportional jitter of ±25%, at
// most 5 attempts, no retry window and no max doublings.
func DefaultPolicy() Policy {
	return Policy{
		Backoff:        DefaultBackoff,
		InitialDelay:   DefaultInitialDelay,
		Multiplier:     DefaultMultiplier,
		MaxDelay:       DefaultMaxDelay,
		Jitter:         DefaultJitter,
		JitterFraction: DefaultJitterFraction,
		MaxAttempts:    DefaultMaxAttempts,
	}
}

// WithDefaults returns a copy of p whose zero-valued fields are filled from
// [DefaultPolicy]. MaxDoublings and RetryWindow stay 0 (no limit). A zero
// MaxDelay becomes 300s, or InitialDelay when that is larger, so that
// setting only a long InitialDelay stays valid. Negative values are kept so
// that [Policy.Validate] can report them. The code lists are shared with p,
// not copied.
func (p Policy) WithDefaults() Policy {
	if p.Backoff == "" {
		p.Backoff = DefaultBackoff
	}
	if p.InitialDelay == 0 {
		p.InitialDelay = DefaultInitialDelay
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = max(DefaultMaxDelay, p.InitialDelay)
	}
	if p.Jitter == "" {
		p.Jitter = DefaultJitter
	}
	if p.JitterFraction == 0 {
		p.JitterFraction = DefaultJitterFraction
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	return p
}
