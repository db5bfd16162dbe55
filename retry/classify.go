package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Built-in error codes reported by [Classify].
const (
	CodeDeadlineExceeded  = "deadline_exceeded"
	CodeCanceled          = "canceled"
	CodeTimeout           = "timeout"
	CodeConnectionRefused = "connection_refused"
	CodeConnectionReset   = "connection_reset"
	CodeUnreachable       = "unreachable"
	CodeDNS               = "dns"
	CodeDNSNotFound       = "dns_not_found"
)

// PostgreSQL SQLSTATE codes that are always worth retrying.
const (
	SQLStateSerializationFailure = "40001"
	SQLStateDeadlockDetected     = "40P01"
)

// sqlStater matches database drivers' errors (pgx's *pgconn.PgError, for
// one) without importing them.
type sqlStater interface{ SQLState() string }

// classification is the full result of classifying an error.
type classification struct {
	class      Class
	code       string
	retryAfter time.Duration
	explicit   bool // class came from a typed *Error
}

// Classify returns the class of err, its error code and any delay the
// failing side asked for. It looks, in order, for:
//
//   - a typed [*Error] ([Permanent], [Transient], [RetryAfter], [WithCode]);
//     its zero fields are filled by classifying the error it wraps. Of an
//     error joining several (errors.Join, fmt.Errorf with several %w), the
//     first branch made [Permanent] decides, wherever it stands; without
//     one, the first typed error found as errors.As finds it;
//   - context.DeadlineExceeded: transient, "deadline_exceeded";
//   - context.Canceled: unknown, "canceled";
//   - [*HTTPError]: 429, 408, 425 and 5xx except 501 are transient, other
//     statuses permanent; the code is the status ("503");
//   - DNS errors ([*net.DNSError]): not found is permanent,
//     "dns_not_found"; temporary failures and timeouts are transient, "dns";
//   - refused connections: transient, "connection_refused";
//   - reset or aborted connections, broken pipes and io.ErrUnexpectedEOF:
//     transient, "connection_reset";
//   - unreachable networks or hosts: transient, "unreachable";
//   - timeouts (net.Error Timeout, os.ErrDeadlineExceeded, ETIMEDOUT):
//     transient, "timeout";
//   - errors with a SQLState() string method (PostgreSQL drivers): 40001
//     (serialization failure) and 40P01 (deadlock) are transient; other
//     states are unknown; the code is the SQLSTATE.
//
// Anything else is ClassUnknown with code "". A nil error is ClassUnknown.
func Classify(err error) (class Class, code string, retryAfter time.Duration) {
	c := classify(err)
	return c.class, c.code, c.retryAfter
}

func classify(err error) classification {
	if err == nil {
		return classification{}
	}
	if c, ok := joinedPermanent(err); ok {
		return c
	}
	var te *Error
	if errors.As(err, &te) {
		if te == nil { // a typed nil *Error returned as an error
			return classification{}
		}
		c := classification{class: te.Class, code: te.Code, retryAfter: te.RetryAfter, explicit: te.Class != ClassUnknown}
		if te.Err != nil && (c.class == ClassUnknown || c.code == "" || c.retryAfter == 0) {
			inner := classify(te.Err)
			if c.class == ClassUnknown {
				c.class, c.explicit = inner.class, inner.explicit
			}
			if c.code == "" {
				c.code = inner.code
			}
			if c.retryAfter == 0 {
				c.retryAfter = inner.retryAfter
			}
		}
		return c
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return classification{class: ClassTransient, code: CodeDeadlineExceeded}
	}
	if errors.Is(err, context.Canceled) {
		return classification{class: ClassUnknown, code: CodeCanceled}
	}
	var he *HTTPError
	if errors.As(err, &he) {
		if he == nil { // a typed nil *HTTPError returned as an error
			return classification{}
		}
		return classification{class: he.Class(), code: strconv.Itoa(he.StatusCode), retryAfter: he.RetryAfter}
	}
	if c, ok := classifyNet(err); ok {
		return c
	}
	var st sqlStater
	if errors.As(err, &st) {
		switch state := st.SQLState(); state {
		case SQLStateSerializationFailure, SQLStateDeadlockDetected:
			return classification{class: ClassTransient, code: state}
		default:
			return classification{class: ClassUnknown, code: state}
		}
	}
	return classification{}
}

// joinedPermanent returns the classification of the first branch
// classified explicitly permanent of an error that joins several
// (errors.Join, fmt.Errorf with several %w), when err is one or wraps one
// before any typed *Error (whose class and cause decide: classify). A
// retry cannot fix that branch, whichever comes first; errors.As alone
// would take the first typed branch, a retryable one as well.
func joinedPermanent(err error) (classification, bool) {
	for err != nil {
		switch e := err.(type) { //nolint:errorlint // a walk of the chain link by link: errors.As would skip to the first typed link
		case *Error:
			return classification{}, false
		case interface{ Unwrap() []error }:
			for _, b := range e.Unwrap() {
				if c := classify(b); c.explicit && c.class == ClassPermanent {
					return c, true
				}
			}
			return classification{}, false
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return classification{}, false
		}
	}
	return classification{}, false
}

func classifyNet(err error) (classification, bool) {
	transient := func(code string) (classification, bool) {
		return classification{class: ClassTransient, code: code}, true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsNotFound:
			return classification{class: ClassPermanent, code: CodeDNSNotFound}, true
		case dns.IsTemporary || dns.IsTimeout:
			return transient(CodeDNS)
		default:
			return classification{class: ClassUnknown, code: CodeDNS}, true
		}
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return transient(CodeConnectionRefused)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF):
		return transient(CodeConnectionReset)
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return transient(CodeUnreachable)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return transient(CodeTimeout)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return transient(CodeTimeout)
	}
	return classification{}, false
}

// Classify classifies err with the package-level [Classify] and then
// applies p's code lists: a typed [Permanent] error stays permanent;
// otherwise the result is [Policy.ClassifyCode] of the code and class.
func (p Policy) Classify(err error) (Class, string, time.Duration) {
	c := classify(err)
	if c.explicit && c.class == ClassPermanent {
		return ClassPermanent, c.code, c.retryAfter
	}
	return p.ClassifyCode(c.code, c.class), c.code, c.retryAfter
}

// ClassifyCode applies p's code lists to an error already classified as
// class with code (for example one reported by a remote worker):
//
//   - a code in NoRetryOn is permanent (the deny list wins);
//   - if RetryOn is not empty, a code in it is transient and every other
//     code (including "") is permanent;
//   - otherwise class is returned unchanged.
//
// ClassifyCode cannot tell an explicit Permanent from a built-in guess such
// as HTTP 409, so an allow-listed code is retried even when class is
// permanent; callers holding an explicitly permanent error should not call
// it (as [Policy.Classify] does not).
func (p Policy) ClassifyCode(code string, class Class) Class {
	if code != "" && slices.Contains(p.NoRetryOn, code) {
		return ClassPermanent
	}
	if len(p.RetryOn) > 0 {
		if code != "" && slices.Contains(p.RetryOn, code) {
			return ClassTransient
		}
		return ClassPermanent
	}
	return class
}
