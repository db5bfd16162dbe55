// Package retry decides whether, and when, a failed operation is tried again.
//
// The package has three layers that can be used on their own:
//
//   - A [Policy] is plain data: a backoff strategy (fixed, linear,
//     exponential with optional max doublings, decorrelated jitter), a
//     jitter mode, a cap on every delay, and the bounds that end retrying
//     (a maximum number of attempts and a retry window measured from the
//     first failure). Policies have a stable JSON form (see
//     [Policy.MarshalJSON]) so they can be stored and sent over HTTP, and
//     [Policy.Validate] reports problems naming the JSON field.
//
//   - Classification turns an error into a [Class] (transient, permanent or
//     unknown), an error code and an optional server-requested delay.
//     Users mark their own errors with [Permanent], [Transient],
//     [RetryAfter] and [WithCode]; [Classify] also understands network
//     errors, context errors, HTTP responses ([HTTPError], [FromResponse])
//     and PostgreSQL serialization failures and deadlocks. A policy's
//     RetryOn and NoRetryOn code lists refine the result
//     ([Policy.Classify]).
//
//   - [Policy.Decide] is the single, allocation-free decision function used
//     by every retry loop in retryq: given the failed attempt it returns
//     retry-after-this-delay or the reason retrying stops. [Do] is the
//     in-process retry loop built on it, with an injectable [Clock] and
//     [Rand] for deterministic tests, hooks that see every attempt, and a
//     final [ExhaustedError] that carries the attempt history.
//
// Unknown errors (those no classifier recognizes) are retried, like
// transient ones; callers that care count them separately using the class
// reported for each attempt.
package retry
