package retry

import "time"

// Error is the typed error that [Permanent], [Transient], [RetryAfter] and
// [WithCode] return. It wraps the user's error, so errors.Is and errors.As
// see through it, and [Classify] finds it through any amount of wrapping
// (for example by fmt.Errorf with %w).
//
// Fields left zero are filled from the wrapped error when classifying: a
// WithCode error around a Transient error is transient with that code.
type Error struct {
	Code       string        // error code matched against RetryOn/NoRetryOn; "" if none
	Class      Class         // ClassUnknown when only a code was attached
	RetryAfter time.Duration // server-requested delay; 0 if none
	Err        error         // the cause
}

// Error returns the cause's message.
func (e *Error) Error() string {
	if e.Err == nil {
		if e.Code != "" {
			return "retry: " + e.Class.String() + " error " + e.Code
		}
		return "retry: " + e.Class.String() + " error"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying. A permanent error stops
// retrying whatever the policy's code lists say, also when it is joined
// with retryable errors (errors.Join): see [Classify]. Permanent(nil) is
// nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: ClassPermanent, Err: err}
}

// Transient marks err as worth retrying. Transient(nil) is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: ClassTransient, Err: err}
}

// RetryAfter marks err as transient and asks for the next attempt to wait
// d (capped by the policy's MaxDelay) instead of the computed backoff; a
// d <= 0 asks for no particular wait and leaves the delay to the backoff.
// RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &Error{Class: ClassTransient, RetryAfter: max(d, 0), Err: err}
}

// WithCode attaches an error code to err, for a policy's RetryOn and
// NoRetryOn lists. The class is taken from err. WithCode(code, nil) is nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}
