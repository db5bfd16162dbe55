package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// ClassLeaseExpired is the error class recorded when a lease expired.
const ClassLeaseExpired = "lease_expired"

// Failure is a failed attempt as reported by whoever ran it.
type Failure struct {
	// Err is the handler's error (in-process workers). When set, the policy
	// classifies it; Code, Class and RetryAfter below are then derived.
	Err error
	// Code, Message and Class describe a failure reported by a remote worker
	// or a push delivery. Class may be ClassUnknown.
	Code       string
	Message    string
	Class      retry.Class
	RetryAfter time.Duration
	// Explicit marks a Class the worker stated rather than one guessed
	// from the code. An explicit permanent failure stays permanent, as a
	// retry.Permanent error does in process: the type's RetryOn list does
	// not make it transient again.
	Explicit bool
	// LeaseExpired marks the reaper's failure for an expired lease.
	LeaseExpired bool
	// Detail is extra history detail (a stack trace, a response excerpt).
	Detail string
}

const maxMessageLen = 4096

// MaxErrorCodeLen bounds a recorded error code, in bytes: a longer code is
// cut to it (after the policy's lists have been matched against the whole
// code), so that every recorded code can be named in a dead-letter filter,
// which takes codes up to this length.
const MaxErrorCodeLen = 200

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Decide is the single retry decision of retryq. Given a task that just
// failed an attempt, the type's configuration and the failure, it returns the
// outcome to record: retry_waiting with the delay chosen by the policy (or the
// failure's Retry-After, capped by the policy), or dead with the reason. Every
// path that ends an attempt in failure — in-process handlers, pull workers,
// push deliveries, expired leases — goes through here.
func (e *Engine) Decide(t *store.Task, spec *TypeSpec, f Failure, now time.Time) store.Outcome {
	pol := &spec.Policy
	class, code, retryAfter := f.Class, f.Code, f.RetryAfter
	msg := f.Message
	errClass := ""
	switch {
	case f.LeaseExpired:
		class, code, errClass = retry.ClassTransient, ClassLeaseExpired, ClassLeaseExpired
		if msg == "" {
			msg = "lease expired before the attempt finished (worker crashed, hung or lost its connection)"
		}
	case f.Err != nil:
		var pe *PanicError
		var text string
		if class, code, retryAfter, text, pe = classifyError(pol, f.Err); pe != nil {
			// The error's own methods panicked: the handler's panic,
			// under the type's code lists as a panic in the handler is.
			f = panicFailure(pe)
			class, code, retryAfter, msg = pol.ClassifyCode(f.Code, f.Class), f.Code, 0, f.Message
		} else if msg == "" {
			msg = text
		}
	case f.Explicit && class == retry.ClassPermanent:
	default:
		class = pol.ClassifyCode(code, class)
	}
	if errClass == "" {
		errClass = class.String()
	}
	first := t.FirstFailureAt
	if first.IsZero() {
		first = now
	}
	d := pol.Decide(retry.Input{
		Attempt:      t.Attempt,
		MaxAttempts:  t.MaxAttempts,
		FirstFailure: first,
		Now:          now,
		PrevDelay:    t.LastDelay,
		Class:        class,
		RetryAfter:   retryAfter,
	}, e.cfg.Rand)
	out := store.Outcome{
		TaskID:      t.ID,
		LeaseID:     t.LeaseID,
		Error:       &store.ErrorInfo{Code: truncate(code, MaxErrorCodeLen), Message: truncate(msg, maxMessageLen), Class: errClass},
		Detail:      f.Detail,
		OutcomeKind: store.OutcomeFailed,
		ReapExpired: f.LeaseExpired,
	}
	if f.LeaseExpired {
		out.OutcomeKind = store.OutcomeLeaseExpired
	}
	if d.Retry {
		out.State = store.StateRetryWaiting
		out.RunAt = now.Add(d.Delay)
		out.LastDelay = d.Delay
		out.EffectivePrio = sinkPriority(t.Priority, t.Attempt, effectiveMax(t, pol))
	} else {
		out.State = store.StateDead
		out.DeadReason = string(d.Stop)
		if out.DeadReason == "" {
			out.DeadReason = store.DeadMaxAttempts
		}
	}
	return out
}

// attemptTimeout is a handler's error that is (or wraps) the cause of its
// context after the per-attempt timeout, ErrAttemptTimeout, as a handler
// returning context.Cause(ctx) gives: it unwraps to context.DeadlineExceeded
// as well, so that it is classified as the timeout it is (transient,
// deadline_exceeded), like ctx.Err().
type attemptTimeout struct{ err error }

func (a *attemptTimeout) Error() string   { return a.err.Error() }
func (a *attemptTimeout) Unwrap() []error { return []error{a.err, context.DeadlineExceeded} }

// timeoutAsDeadline wraps err in an attemptTimeout when it is the
// per-attempt timeout's cause without being context.DeadlineExceeded.
func timeoutAsDeadline(err error) error {
	if errors.Is(err, ErrAttemptTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return &attemptTimeout{err}
	}
	return err
}

func effectiveMax(t *store.Task, pol *retry.Policy) int {
	if t.MaxAttempts > 0 {
		return t.MaxAttempts
	}
	return pol.MaxAttempts
}

// sinkPriority lowers a task's ordering priority by one per failed attempt so
// that fresh work is not starved by retries, except for its last chance: the
// attempt before the dead-letter queue runs at the task's own priority again.
func sinkPriority(base, failed, max int) int {
	if max > 0 && failed+1 >= max {
		return base
	}
	p := base - failed
	if p < -MaxPriority {
		p = -MaxPriority
	}
	return p
}

// PanicError is the error recorded when a handler panics.
type PanicError struct {
	Value any
	Stack string
}

func (p *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.Value) }

// classifyError classifies a failed attempt's error under pol and returns
// its message. A handler that returns a nil pointer of an error type (a
// non-nil error whose methods dereference it) has panicked as surely as
// one that panics itself: the Error, Unwrap, Is and As methods called here
// run under recover, and a panic in them comes back as a *PanicError
// instead of ending the process outside the handler's recovery.
func classifyError(pol *retry.Policy, err error) (class retry.Class, code string, retryAfter time.Duration, msg string, pe *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			pe = errorPanic(err, r)
		}
	}()
	class, code, retryAfter = pol.Classify(timeoutAsDeadline(err))
	return class, code, retryAfter, err.Error(), nil
}

// errorPanic is the *PanicError of an error whose method panicked with r.
func errorPanic(err error, r any) *PanicError {
	return &PanicError{Value: fmt.Sprintf("the returned error (%T) panicked: %v", err, r), Stack: string(debug.Stack())}
}

// inspectHandlerError reads what the worker needs from a handler's error
// (a panic it carries, whether it is a deadline) under recover, like
// classifyError: a panic in the error's methods is the handler's panic.
func inspectHandlerError(err error) (pe *PanicError, deadline bool) {
	defer func() {
		if r := recover(); r != nil {
			pe, deadline = errorPanic(err, r), false
		}
	}()
	if errors.As(err, &pe) {
		return pe, false
	}
	return nil, errors.Is(err, context.DeadlineExceeded)
}

// panicFailure: panics are unknown errors (retried, counted apart) with code "panic".
func panicFailure(p *PanicError) Failure {
	return Failure{Code: "panic", Message: p.Error(), Class: retry.ClassUnknown, Detail: p.Stack}
}

// ReportedError is a failure reported by a remote (pull) worker.
type ReportedError struct {
	Code       string
	Message    string
	Retryable  *bool // nil = let the policy classify the code
	RetryAfter time.Duration
}

// failure converts a remote report into a Failure.
func (r ReportedError) failure() Failure {
	f := Failure{Code: r.Code, Message: r.Message, Class: retry.ClassUnknown, RetryAfter: r.RetryAfter}
	if r.Retryable != nil {
		f.Explicit = true
		if *r.Retryable {
			f.Class = retry.ClassTransient
		} else {
			f.Class = retry.ClassPermanent
		}
	} else if n, err := strconv.Atoi(r.Code); err == nil && n >= 400 && n <= 599 {
		// An HTTP status is classified as in process and for push
		// deliveries, whether or not a Retry-After came with it: a 404
		// with Retry-After is still permanent.
		f.Class = (&retry.HTTPError{StatusCode: n}).Class()
	} else if r.RetryAfter > 0 {
		f.Class = retry.ClassTransient
	}
	return f
}
