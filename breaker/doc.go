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
// Every method takes the current time, so the breaker is deterministic
// under test and never reads a clock itself. A Breaker is safe for
// concurrent use. State changes are reported to Config.OnStateChange, called
// without the breaker's lock held.
package breaker
