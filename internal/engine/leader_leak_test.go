package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestLeadershipChangingHandsLeaksNothing hands the scheduler's
// leadership back and forth between two engines on one PostgreSQL
// database, many times, by failing the lease attempts of the leader
// until the other takes over: each change stops one node's scheduler
// loops and starts the other's, and once the first node leads again the
// process holds no more goroutines, descriptors nor database sessions
// than when it first did.
func TestLeadershipChangingHandsLeaksNothing(t *testing.T) {
	dbURL := pgtest.URL(t)
	pg := openPG(t, dbURL)
	// Every connection of the pool open: a pool growing to its bound over
	// the changes would read as descriptors leaked.
	fillPool := func() {
		t.Helper()
		var conns []*pgxpool.Conn
		for range pg.Pool().Config().MaxConns {
			c, err := pg.Pool().Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	fillPool()
	errDown := errors.New("lease attempts of this node fail (test)")
	var stores [2]*leaderStore
	var down [2]atomic.Bool
	var engines [2]*Engine
	for i := range stores {
		s := &leaderStore{Store: pg}
		s.acquire = func(ctx context.Context, _ int, p store.LeaderParams) (store.Lease, error) {
			if down[i].Load() {
				return store.Lease{}, errDown
			}
			return s.Store.AcquireLeader(ctx, p)
		}
		stores[i] = s
	}
	// The second engine starts once the first leads.
	engines[0] = startLeaderEngine(t, stores[0], "hands-a", MinLeaderTTL, nil)
	waitFor(t, "the first engine to lead", engines[0].IsLeader)
	engines[1] = startLeaderEngine(t, stores[1], "hands-b", MinLeaderTTL, nil)
	// handOver makes engine from stop leading and waits until to leads
	// and its scheduler loops run: IsLeader turns true just before the
	// loops' goroutine starts, and a baseline taken in between would lack
	// it (the check failed once so, with one goroutine more at the end).
	handOver := func(from, to int) {
		t.Helper()
		loops := len(stores[to].loopInstances())
		down[to].Store(false)
		down[from].Store(true)
		waitFor(t, fmt.Sprintf("engine %d to stop leading", from), func() bool { return !engines[from].IsLeader() })
		waitFor(t, fmt.Sprintf("engine %d to lead", to), engines[to].IsLeader)
		waitFor(t, fmt.Sprintf("engine %d's scheduler loops to run", to), func() bool {
			return len(stores[to].loopInstances()) > loops
		})
	}
	// Both engines' pools, readers and loops have run once before the
	// baseline.
	handOver(0, 1)
	handOver(1, 0)
	// Filled again: pgx closes a connection whose query was cancelled (a
	// loop stopped at a change of leader), and a baseline taken before
	// the pool opens one anew would lack it.
	fillPool()
	base := leakcheck.Take(t)
	for range 4 {
		handOver(0, 1)
		handOver(1, 0)
	}
	base.Settled(t, 10*time.Second, "8 changes of leader")
	leakcheck.BackendsSettled(t, dbURL, int(pg.Pool().Config().MaxConns)+2, 10*time.Second, "8 changes of leader")
}
