// Package budget limits retries across a whole service, so that retries
// cannot multiply load on a struggling dependency ("retry storms").
//
// A [Budget] enforces up to two rules; a retry must pass both:
//
//   - Rate: at most RetriesPerMinute retries per minute, as a token bucket
//     that holds a minute's worth of tokens and refills continuously.
//
//   - Ratio: retries at most RetryRatio of first attempts, with a floor of
//     MinRetriesPerSecond (the retry budget of gRPC and Finagle). Every
//     first attempt deposits RetryRatio tokens, every retry withdraws one,
//     and a reserve of MinRetriesPerSecond × Window is always there. The
//     window moves in Buckets steps: deposits expire with their bucket,
//     after Window at most, and withdrawals one bucket later, so that the
//     retries of any interval one Window long never exceed what the rule
//     allows, and the budget reflects recent traffic only.
//
// Callers report first attempts with [Budget.RecordAttempt] and ask before
// each retry with [Budget.AllowRetry], which spends from the budget when it
// says yes and otherwise tells when the next retry would be allowed.
//
// Every method takes the current time, so a Budget is deterministic under
// test. A Budget is safe for concurrent use.
package budget
