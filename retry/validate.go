package retry

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidPolicy is wrapped by every error from [Policy.Validate] and
// [Policy.UnmarshalJSON], so callers can test for it with errors.Is.
var ErrInvalidPolicy = errors.New("invalid retry policy")

// FieldError reports one invalid policy field. Field is the field's JSON
// name (for example "max_delay_seconds"), so messages match what users
// write; front ends may map it to their own names (a CLI flag, say).
type FieldError struct {
	Field  string // JSON name of the offending field; "" for the document as a whole
	Reason string // what is wrong, e.g. "must be >= 1 (got 0.5)"
}

// Error returns "retry policy: FIELD: REASON".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return "retry policy: " + e.Reason
	}
	return "retry policy: " + e.Field + ": " + e.Reason
}

// Is reports whether target is [ErrInvalidPolicy].
func (e *FieldError) Is(target error) bool { return target == ErrInvalidPolicy }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate reports the first problem with p, as a [*FieldError] naming the
// JSON field and wrapping [ErrInvalidPolicy]. Zero fields are valid: they
// mean "default", so Validate checks p.WithDefaults().
func (p Policy) Validate() error {
	q := p.WithDefaults()
	switch q.Backoff {
	case BackoffFixed, BackoffLinear, BackoffExponential, BackoffDecorrelated:
	default:
		return fieldErr("backoff", "unknown strategy %q (want fixed, linear, exponential or decorrelated)", string(q.Backoff))
	}
	switch q.Jitter {
	case JitterNone, JitterProportional, JitterFull, JitterEqual:
	default:
		return fieldErr("jitter", "unknown mode %q (want none, proportional, full or equal)", string(q.Jitter))
	}
	if q.InitialDelay < 0 {
		return fieldErr("initial_delay_seconds", "must be > 0 (got %s)", formatSeconds(q.InitialDelay))
	}
	if q.MaxDelay < 0 {
		return fieldErr("max_delay_seconds", "must be > 0 (got %s)", formatSeconds(q.MaxDelay))
	}
	if q.MaxDelay < q.InitialDelay {
		return fieldErr("max_delay_seconds", "must be >= initial_delay_seconds (got %s < %s)",
			formatSeconds(q.MaxDelay), formatSeconds(q.InitialDelay))
	}
	if math.IsNaN(q.Multiplier) || math.IsInf(q.Multiplier, 0) || q.Multiplier < 1 {
		return fieldErr("multiplier", "must be a finite number >= 1 (got %g)", q.Multiplier)
	}
	if q.MaxDoublings < 0 {
		return fieldErr("max_doublings", "must be >= 0 (got %d)", q.MaxDoublings)
	}
	if math.IsNaN(q.JitterFraction) || q.JitterFraction < 0 || q.JitterFraction > 1 {
		return fieldErr("jitter_fraction", "must be between 0 and 1 (got %g)", q.JitterFraction)
	}
	if q.MaxAttempts < 1 {
		return fieldErr("max_attempts", "must be >= 1 (got %d)", q.MaxAttempts)
	}
	if q.RetryWindow < 0 {
		return fieldErr("retry_window_seconds", "must be >= 0 (got %s)", formatSeconds(q.RetryWindow))
	}
	if err := validateCodes("retry_on", q.RetryOn); err != nil {
		return err
	}
	return validateCodes("no_retry_on", q.NoRetryOn)
}

func validateCodes(field string, codes []string) error {
	for i, c := range codes {
		if c == "" {
			return fieldErr(field, "entry %d is empty", i)
		}
	}
	return nil
}
