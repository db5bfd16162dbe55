package engine

import (
	"sync/atomic"

	"github.com/retryq/retryq/store"
)

// Counters are cumulative engine counters since start, for metrics and for
// seeing how well writes are batched.
type Counters struct {
	InsertCommits  int64 // transactions of coalesced enqueues
	Inserted       int64 // tasks inserted by them
	Fetches        int64 // fetch transactions by in-process workers
	Fetched        int64 // tasks leased by them
	OutcomeCommits int64 // transactions of coalesced outcomes
	Outcomes       int64 // outcomes recorded by them (not those refused: see LeaseLost)
	Succeeded      int64
	Retried        int64
	Dead           int64
	LeaseLost      int64 // outcomes refused, or not sent, because the lease was gone
	Reaped         int64 // expired leases handled by the reaper
	Promoted       int64 // tasks promoted by the scheduler
	Dispatched     int64 // tasks leased at enqueue to an idle local worker (no fetch)
	// Retention deletions on this node (never silent: also logged).
	DeletedSucceeded, DeletedCancelled, DeletedDead int64
}

type counters struct {
	insertCommits, inserted, fetches, fetched, outcomeCommits, outcomes atomic.Int64
	succeeded, retried, dead, leaseLost, reaped, promoted               atomic.Int64
	dispatched                                                          atomic.Int64
}

// Counters returns a snapshot of the engine's counters.
func (e *Engine) Counters() Counters {
	c := &e.ctr
	r := e.Retained()
	return Counters{
		InsertCommits: c.insertCommits.Load(), Inserted: c.inserted.Load(),
		Fetches: c.fetches.Load(), Fetched: c.fetched.Load(),
		OutcomeCommits: c.outcomeCommits.Load(), Outcomes: c.outcomes.Load(),
		Succeeded: c.succeeded.Load(), Retried: c.retried.Load(), Dead: c.dead.Load(),
		LeaseLost: c.leaseLost.Load(), Reaped: c.reaped.Load(), Promoted: c.promoted.Load(),
		Dispatched:       c.dispatched.Load(),
		DeletedSucceeded: int64(r.Succeeded), DeletedCancelled: int64(r.Cancelled), DeletedDead: int64(r.Dead),
	}
}

// countRecorded counts an outcome the store accepted by the state it left
// the task in: every recorded decision, whoever made it (a worker's outcome
// or the reaper's), is counted once.
func (c *counters) countRecorded(o *store.Outcome) {
	switch o.State {
	case store.StateSucceeded:
		c.succeeded.Add(1)
	case store.StateDead:
		c.dead.Add(1)
	case store.StateRetryWaiting:
		c.retried.Add(1)
	}
}
