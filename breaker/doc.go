// Package breaker is a circuit breaker for calls to one downstream
// dependency, and a [Set] of breakers keyed by downstream name.
//
// A [Breaker] starts closed and lets every call through. It opens when
// either rule trips:
//
//   - ConsecutiveFailures failures in a row, or
//   - at least RateMinFailures failures making up at least FailureRate of
//     the calls in the sliding Window (for example 50 failures and 50% of
//     the last minute). The window is kept in a fixed number of buckets, so
//     memory does not grow with traffic.
//
// While open, [Breaker.Allow] refuses calls and says when to come back.
// After CoolDown the breaker is half-open: up to HalfOpenProbes calls are
// let through as probes; SuccessesToClose probe successes close it, and a
// probe failure opens it again for another CoolDown.
//
// [Breaker.Acquire] returns a [Permit] for each call let through, to report
// its outcome with: Success, Failure (the downstream is unhealthy) or
// Release (the call says nothing about the downstream: cancelled by its
// caller, or refused for its own input). A permit's outcome counts only in
// the state and probe round it was let through in, so the late answer of a
// slow call let through before the breaker opened is never taken for a
// probe's. A refused call gets an [*OpenError], wrapping [ErrOpen], that
// says when to ask again; a caller can wait until then instead of spending
// an attempt. [Breaker.Allow], [Breaker.Success] and [Breaker.Failure] are
// the same without permits: they cannot tell a probe's answer from a late
// one while a probe is out.
//
// Every method takes the current time, so the breaker is deterministic
// under test and never reads a clock itself. A Breaker is safe for
// concurrent use. State changes are reported to Config.OnStateChange in
// the order they happened, one at a time, without the breaker's lock held.
package breaker
