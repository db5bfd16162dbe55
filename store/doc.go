// Package store defines the storage seam of retryq: the Store interface that
// every backend implements, the records it moves (tasks, attempts, task types,
// nodes, leader leases) and the sentinel errors backends translate their
// native errors into.
//
// Every method takes a params struct carrying the caller's notion of "now",
// so that time is injectable and the conformance suite in store/storetest is
// deterministic. Every state transition is a single conditional update: it
// names the state (and, for leased tasks, the lease) it expects, so a stale
// worker, a late completion or a second scheduler can never move a task twice.
//
// Backends live in sub-packages (store/sqlite, store/postgres), import only
// this package, own their SQL and embed their migrations. Applications open
// a backend and hand it to retryq.NewClient; they need not call a Store's
// methods themselves, and a Client's errors match this package's sentinels
// (retryq.ErrNotFound is ErrNotFound, for one).
package store
