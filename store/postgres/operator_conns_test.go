package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestOperatorCallsLeaveConnectionsForTheEngine: listings, statistics and
// bulk DLQ calls (what operators and dashboards ask, as many at once as
// they like) hold at most half of the pool between them, so that slow
// ones (a statistics scan of a large table, a statement stuck behind a
// lock) do not take every connection while the engine's own calls (the
// leader's renewal, heartbeats, outcomes) wait for one until leases and
// the leadership are lost. Before, they took the whole pool.
func TestOperatorCallsLeaveConnectionsForTheEngine(t *testing.T) {
	url := pgtest.URL(t)
	const maxConns = 4
	s := openURL(t, url, func(c *Config) { c.MaxConns = maxConns })
	ctx := t.Context()
	now := time.Now()

	// A slow statement: every operator call on tasks waits for x's lock.
	x := connect(t, url)
	tx, err := x.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	calls := []func(context.Context) error{
		func(ctx context.Context) error { _, err := s.Stats(ctx, store.StatsParams{Since: now}); return err },
		func(ctx context.Context) error {
			_, _, err := s.ListTasks(ctx, store.ListParams{Limit: 10})
			return err
		},
		func(ctx context.Context) error { _, _, err := s.ListDead(ctx, store.DeadFilter{Limit: 10}); return err },
		func(ctx context.Context) error {
			_, err := s.DeadSummary(ctx, store.SummaryParams{Limit: 10})
			return err
		},
		func(ctx context.Context) error { _, err := s.RedriveDead(ctx, store.DeadFilter{Now: now}); return err },
		func(ctx context.Context) error { _, err := s.PurgeDead(ctx, store.DeadFilter{}); return err },
	}
	done := make(chan error, 2*len(calls))
	for range 2 {
		for _, call := range calls {
			go func() { done <- call(ctx) }()
		}
	}
	y := connect(t, url)
	const waiting = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	waitUntil(t, y, "operator calls to wait for the lock", "SELECT ("+waiting+") >= $1", maxConns/2)
	// They never hold more than half of the pool, however long they wait.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := y.QueryRow(ctx, waiting).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > maxConns/2 {
			t.Fatalf("%d operator calls hold a connection of a pool of %d; want at most %d", n, maxConns, maxConns/2)
		}
	}
	// The leader renews its lease meanwhile, within its bound.
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	lease, err := s.AcquireLeader(lctx, store.LeaderParams{Name: "scheduler", NodeID: "n1", TTL: 10 * time.Second, Now: time.Now()})
	cancel()
	if err != nil || lease.NodeID != "n1" {
		t.Fatalf("leader renewal while operator calls wait: %+v, %v", lease, err)
	}
	// An operator call waiting for its turn gives up with its context.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.Stats(sctx, store.StatsParams{Since: now})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stats waiting for a connection past its deadline: %v; want context.DeadlineExceeded", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for range 2 * len(calls) {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator call: %v", err)
			}
		case <-timeout:
			t.Fatal("operator calls still waiting 30 s after the lock went")
		}
	}
}

// TestOperatorCallsRefuseBadInputWithoutWaiting: an operator call with
// invalid arguments is refused with store.ErrInvalid at once, even while
// every operator slot is taken: it needs no connection. It waited for a
// slot first, so behind slow calls it answered its context's deadline
// (a timeout, where the caller's request was at fault) after the wait.
func TestOperatorCallsRefuseBadInputWithoutWaiting(t *testing.T) {
	s := openURL(t, pgtest.URL(t), func(c *Config) { c.MaxConns = 2 })
	for range cap(s.opSlots) { // slow calls hold every slot
		s.opSlots <- struct{}{}
	}
	calls := map[string]func(context.Context) error{
		"ListTasks": func(ctx context.Context) error {
			_, _, err := s.ListTasks(ctx, store.ListParams{Limit: 0})
			return err
		},
		"ListDead": func(ctx context.Context) error {
			_, _, err := s.ListDead(ctx, store.DeadFilter{Limit: 10, Cursor: "\x00"})
			return err
		},
		"DeadSummary": func(ctx context.Context) error {
			_, err := s.DeadSummary(ctx, store.SummaryParams{Limit: -1})
			return err
		},
		"RedriveDead": func(ctx context.Context) error { _, err := s.RedriveDead(ctx, store.DeadFilter{}); return err },
		"PurgeDead":   func(ctx context.Context) error { _, err := s.PurgeDead(ctx, store.DeadFilter{Limit: -1}); return err },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := call(ctx)
		cancel()
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s with invalid arguments while every operator slot is taken: %v; want store.ErrInvalid", name, err)
		}
	}
}
