package breaker

import (
	"errors"
	"fmt"
	"time"
)

// ErrOpen is wrapped by the [*OpenError] that [Breaker.Acquire] returns
// when it refuses a call.
var ErrOpen = errors.New("circuit breaker open")

// OpenError is the error of a call refused by [Breaker.Acquire]. It says
// when asking again can succeed, so that a caller can wait behind an open
// breaker (for example by rescheduling a task for RetryAt) instead of
// counting the refusal as a failed attempt. It wraps [ErrOpen].
type OpenError struct {
	Name       string        // the breaker's name
	State      State         // Open, or HalfOpen with every probe out
	RetryAt    time.Time     // the earliest time at which Acquire can succeed
	RetryAfter time.Duration // RetryAt minus the time passed to Acquire
}

// Error names the breaker, its state and the wait.
func (e *OpenError) Error() string {
	if e.State == HalfOpen {
		return fmt.Sprintf("circuit breaker %q half-open with every probe out: retry after %v", e.Name, e.RetryAfter)
	}
	return fmt.Sprintf("circuit breaker %q open: retry after %v", e.Name, e.RetryAfter)
}

// Unwrap returns [ErrOpen].
func (e *OpenError) Unwrap() error { return ErrOpen }

// Permit is one call let through by [Breaker.Acquire]. Report its outcome
// exactly once, with [Permit.Success], [Permit.Failure] or
// [Permit.Release]. A permit's outcome counts only in the state (and, while
// half-open, the round of probes) it was let through in: the late answer of
// a call let through before the breaker opened is not taken for a probe's.
// A probe's answers after its first are ignored (a closed breaker's calls
// cannot tell: answered twice, they count twice). The zero Permit belongs
// to no breaker; its methods do nothing.
type Permit struct {
	b     *Breaker
	gen   uint64
	probe uint64 // the probe's id; 0 if the call is no probe
}

// Acquire asks to make a call at now. It returns a [Permit] when the call
// may go ahead, and otherwise an [*OpenError] (wrapping [ErrOpen]) saying
// when to ask again.
func (b *Breaker) Acquire(now time.Time) (Permit, error) {
	b.mu.Lock()
	ok, retryAt, probe := b.admit(now)
	p, state := Permit{b: b, gen: b.gen, probe: probe}, b.state
	b.unlock()
	if !ok {
		return Permit{}, &OpenError{Name: b.name, State: state, RetryAt: retryAt, RetryAfter: retryAt.Sub(now)}
	}
	return p, nil
}

// Probe reports whether the permit is a half-open breaker's probe.
func (p Permit) Probe() bool { return p.probe != 0 }

// Success records that the call succeeded at now.
func (p Permit) Success(now time.Time) {
	if p.b != nil {
		p.b.result(now, false, &p)
	}
}

// Failure records that the call failed at now: the downstream is unhealthy
// (a timeout, a refused connection, a 5xx or a 429).
func (p Permit) Failure(now time.Time) {
	if p.b != nil {
		p.b.result(now, true, &p)
	}
}

// Release ends the call without an outcome, for a call whose end says
// nothing about the downstream's health: cancelled by the caller, or
// failed permanently because of its own input (a 400). A probe's slot is
// given back; nothing is counted.
func (p Permit) Release() {
	if p.b == nil {
		return
	}
	b := p.b
	b.mu.Lock()
	if p.probe != 0 && p.gen == b.gen && b.state == HalfOpen {
		b.answered(&p)
	}
	b.unlock()
}
