package budget

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/retryq/retryq/internal/window"
)

// Config configures a [Budget]. A rule whose fields are all zero is off;
// a Config with both rules off takes the limits of [DefaultConfig].
type Config struct {
	// RetriesPerMinute caps retries per minute (rate rule); 0 turns the
	// rule off.
	RetriesPerMinute int
	// RetryRatio is the fraction of first attempts that may be retried
	// (ratio rule), e.g. 0.2 for 20%.
	RetryRatio float64
	// MinRetriesPerSecond is the ratio rule's floor: this many retries per
	// second are allowed whatever the traffic. The ratio rule is off when
	// both RetryRatio and MinRetriesPerSecond are 0.
	MinRetriesPerSecond float64
	// Window is how long deposits and withdrawals of the ratio rule count;
	// default 10s.
	Window time.Duration
	// Buckets is the resolution of Window; default 10, at most 3600.
	Buckets int
}

// ErrInvalidConfig is wrapped by every error from [Config.Validate].
var ErrInvalidConfig = errors.New("invalid budget config")

// Default values.
const (
	DefaultRetryRatio          = 0.2
	DefaultMinRetriesPerSecond = 10
	DefaultWindow              = 10 * time.Second
	DefaultBuckets             = 10
)

// DefaultConfig returns the ratio rule of gRPC and Finagle: retries at most
// 20% of first attempts, with a floor of 10 retries per second, over a 10s
// window; no per-minute cap.
func DefaultConfig() Config {
	return Config{
		RetryRatio:          DefaultRetryRatio,
		MinRetriesPerSecond: DefaultMinRetriesPerSecond,
		Window:              DefaultWindow,
		Buckets:             DefaultBuckets,
	}
}

// WithDefaults returns c with a zero Window and Buckets set to their
// defaults, and with the default ratio rule when no rule is on.
func (c Config) WithDefaults() Config {
	if c.RetriesPerMinute == 0 && c.RetryRatio == 0 && c.MinRetriesPerSecond == 0 {
		c.RetryRatio, c.MinRetriesPerSecond = DefaultRetryRatio, DefaultMinRetriesPerSecond
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Buckets == 0 {
		c.Buckets = DefaultBuckets
	}
	return c
}

// ratioOn reports whether the ratio rule is on.
func (c Config) ratioOn() bool { return c.RetryRatio > 0 || c.MinRetriesPerSecond > 0 }

// Validate reports the first problem with c.WithDefaults(), naming the
// field, wrapped with [ErrInvalidConfig].
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("budget config: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	wf, wr := window.CheckSize(c.Window, c.Buckets)
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case c.RetriesPerMinute < 0:
		return bad("RetriesPerMinute", "must be >= 0 (got %d)", c.RetriesPerMinute)
	case !finite(c.RetryRatio) || c.RetryRatio < 0 || c.RetryRatio > 1000:
		return bad("RetryRatio", "must be between 0 and 1000 (got %g)", c.RetryRatio)
	case !finite(c.MinRetriesPerSecond) || c.MinRetriesPerSecond < 0 || c.MinRetriesPerSecond > 1e9:
		return bad("MinRetriesPerSecond", "must be between 0 and 1e9 (got %g)", c.MinRetriesPerSecond)
	case wf != "":
		return bad(wf, "%s", wr)
	}
	return nil
}
