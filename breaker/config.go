package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/retryq/retryq/internal/window"
)

// Config configures a [Breaker]. Zero fields take the defaults listed on
// each field (see [DefaultConfig]).
type Config struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row; default 5. A negative value disables the rule.
	ConsecutiveFailures int
	// FailureRate opens the breaker when at least this fraction of the
	// calls in Window failed (and at least RateMinFailures did); default
	// 0.5. A negative value disables the rule.
	FailureRate float64
	// RateMinFailures is the number of failures in Window below which the
	// rate rule never trips; default 50.
	RateMinFailures int
	// Window is the length of the sliding window of the rate rule;
	// default 1 minute.
	Window time.Duration
	// Buckets is how many buckets the window is kept in (its resolution);
	// default 12, at most 3600.
	Buckets int
	// CoolDown is how long the breaker stays open before probing, and how
	// long a round of probes is waited for once all are out: a cool-down
	// after its newest probe was let through; default 30s.
	CoolDown time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through
	// before it hears back; default 1, at most [MaxHalfOpenProbes].
	HalfOpenProbes int
	// SuccessesToClose is how many probe successes close a half-open
	// breaker; default 2.
	SuccessesToClose int
	// OnStateChange, if set, is called after every state change, without
	// the breaker's lock held, so it may call back into the breaker. Calls
	// are made one at a time, in the order of the changes: a change made
	// while the hook runs (by the hook itself, or by another goroutine) is
	// reported by the goroutine running the hook, after the change it is
	// reporting, so the call that made it may return first.
	OnStateChange func(Transition)
}

// MaxHalfOpenProbes bounds Config.HalfOpenProbes: a half-open breaker
// keeps a word for each probe out until it is answered or given up on.
const MaxHalfOpenProbes = 1 << 16

// ErrInvalidConfig is wrapped by every error from [Config.Validate].
var ErrInvalidConfig = errors.New("invalid breaker config")

// DefaultConfig returns the defaults: open after 5 consecutive failures or
// after 50 failures that are at least half of the calls in the last minute
// (12 buckets of 5s); cool down 30s; 1 probe at a time; close after 2
// probe successes.
func DefaultConfig() Config {
	return Config{
		ConsecutiveFailures: 5,
		FailureRate:         0.5,
		RateMinFailures:     50,
		Window:              time.Minute,
		Buckets:             12,
		CoolDown:            30 * time.Second,
		HalfOpenProbes:      1,
		SuccessesToClose:    2,
	}
}

// WithDefaults returns c with its zero fields taken from [DefaultConfig].
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = d.ConsecutiveFailures
	}
	if c.FailureRate == 0 {
		c.FailureRate = d.FailureRate
	}
	if c.RateMinFailures == 0 {
		c.RateMinFailures = d.RateMinFailures
	}
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.Buckets == 0 {
		c.Buckets = d.Buckets
	}
	if c.CoolDown == 0 {
		c.CoolDown = d.CoolDown
	}
	if c.HalfOpenProbes == 0 {
		c.HalfOpenProbes = d.HalfOpenProbes
	}
	if c.SuccessesToClose == 0 {
		c.SuccessesToClose = d.SuccessesToClose
	}
	return c
}

// Validate reports the first problem with c.WithDefaults(), naming the
// field, wrapped with [ErrInvalidConfig].
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("breaker config: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	wf, wr := window.CheckSize(c.Window, c.Buckets)
	switch {
	case math.IsNaN(c.FailureRate) || c.FailureRate > 1:
		return bad("FailureRate", "must be at most 1, or negative to disable (got %g)", c.FailureRate)
	case c.ConsecutiveFailures < 0 && c.FailureRate < 0:
		return bad("ConsecutiveFailures", "and FailureRate cannot both be disabled")
	case c.RateMinFailures < 0:
		return bad("RateMinFailures", "must be >= 0 (got %d)", c.RateMinFailures)
	case wf != "":
		return bad(wf, "%s", wr)
	case c.CoolDown < 0:
		return bad("CoolDown", "must be > 0 (got %v)", c.CoolDown)
	case c.HalfOpenProbes < 0 || c.HalfOpenProbes > MaxHalfOpenProbes:
		return bad("HalfOpenProbes", "must be between 1 and %d (got %d)", MaxHalfOpenProbes, c.HalfOpenProbes)
	case c.SuccessesToClose < 0:
		return bad("SuccessesToClose", "must be >= 1 (got %d)", c.SuccessesToClose)
	}
	return nil
}
