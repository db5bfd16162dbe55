// Package engine is retryq's core: it validates and enqueues tasks (coalescing
// concurrent enqueues into shared commits), leases due tasks to workers,
// records their outcomes (again in shared commits), and makes the single
// retry decision for every failed attempt, whether it failed in an
// in-process handler, in a remote pull worker, in a push delivery or by lease
// expiry. It also runs the scheduler loops (retry promotion, lease reaping,
// retention) on the elected leader node only.
//
// The engine talks to storage only through store.Store.
package engine
