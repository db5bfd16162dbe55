package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestLeaseTableForgetsCancellationsOnceOld: the cancellations of leases
// this process does not hold (on PostgreSQL every node hears of every
// cancellation) are remembered for goneTTL, then forgotten by the lease
// watchdog's passes even when no cancellation follows. Before, only the
// next cancellation forgot them: a burst (a script cancelling a backlog
// of 20,000 tasks) stayed in every node's memory until then.
func TestLeaseTableForgetsCancellationsOnceOld(t *testing.T) {
	lt := newLeaseTable()
	const n = 20_000
	for i := range n {
		lt.cancelled(fmt.Sprintf("task-%d", i), "lease")
	}
	// Time passes: the burst is older than goneTTL.
	lt.mu.Lock()
	for id, g := range lt.gone {
		g.at = g.at.Add(-goneTTL - time.Second)
		lt.gone[id] = g
	}
	lt.lastPurge = lt.lastPurge.Add(-goneTTL - time.Second)
	lt.mu.Unlock()
	lt.expire(time.Now(), time.Second) // a watchdog pass
	lt.mu.Lock()
	left := len(lt.gone)
	lt.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d of %d cancellations older than %s still remembered after a watchdog pass; want 0", left, n, goneTTL)
	}
}
