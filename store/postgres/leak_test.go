package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// fillPool opens every connection s's pool may hold: a pool growing to
// its bound over a test's cycles would read as a leak.
func fillPool(t *testing.T, s *Store) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, s.pool.Config().MaxConns)
	for range s.pool.Config().MaxConns {
		c, err := s.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// TestStoreCyclesLeakNothing opens a store, listens, writes and closes
// it, and fails to open one on a database that does not exist, many
// times: the process holds no more goroutines nor descriptors afterwards
// than after the first round, and the database has no session left.
func TestStoreCyclesLeakNothing(t *testing.T) {
	dbURL := pgtest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	missing := u.String()
	round := func(i int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := Open(ctx, Config{URL: dbURL, AutoMigrate: true, MaxConns: 3})
		if err != nil {
			t.Fatal(err)
		}
		wake := s.Wakeups(ctx)
		_ = s.Cancellations(ctx)
		waitWakeup(t, wake, "the listener's first connection")
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("c%02d", i), 1), Now: t0}); err != nil {
			t.Fatal(err)
		}
		waitWakeup(t, wake, "an insert")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for range wake { // closed by Close
		}
		if s, err := Open(ctx, Config{URL: missing}); err == nil {
			_ = s.Close()
			t.Fatal("Open of a database that does not exist succeeded")
		}
	}
	round(0)
	base := leakcheck.Take(t)
	for i := 1; i <= 20; i++ {
		round(i)
	}
	base.Settled(t, 10*time.Second, "20 stores opened and closed")
	leakcheck.BackendsSettled(t, dbURL, 0, 10*time.Second, "20 stores opened and closed")
}

// TestListenerSubscriptionsLeakNothing subscribes to wake-ups and
// cancellations and ends the subscription, many times, on a store that
// stays open (as a program making an engine per scope does): each
// listener's connection closes, and no receiver stays registered.
func TestListenerSubscriptionsLeakNothing(t *testing.T) {
	dbURL := pgtest.URL(t)
	s := openURL(t, dbURL, func(c *Config) { c.MaxConns = 3 })
	fillPool(t, s)
	round := func() {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		wake, cancels := s.Wakeups(ctx), s.Cancellations(ctx)
		waitWakeup(t, wake, "the listener's first connection")
		cancel()
		for range wake {
		}
		for range cancels {
		}
	}
	round()
	base := leakcheck.Take(t)
	for range 30 {
		round()
	}
	base.Settled(t, 10*time.Second, "30 subscriptions ended")
	leakcheck.BackendsSettled(t, dbURL, int(s.pool.Config().MaxConns), 10*time.Second, "30 subscriptions ended")
	s.cancelMu.Lock()
	n := len(s.cancelSubs)
	s.cancelMu.Unlock()
	if n != 0 {
		t.Fatalf("%d cancellation receivers still registered after their subscriptions ended", n)
	}
}

// TestServerOutagesLeakNothing restarts the server under an open store
// that listens, and ends every session of its database in between, many
// times: once the store works again after each, the process holds no
// more goroutines nor descriptors than after the first, and the database
// no more sessions than the pool's and the listener's.
func TestServerOutagesLeakNothing(t *testing.T) {
	c := pgtest.NewCluster(t)
	dbURL := c.NewDatabase(t)
	s := openURL(t, dbURL, func(c *Config) {
		c.MaxConns, c.ReconnectMin, c.ReconnectMax, c.ConnectTimeout = 3, 10*time.Millisecond, 200*time.Millisecond, 2*time.Second
	})
	wake := s.Wakeups(t.Context())
	waitWakeup(t, wake, "the listener's first connection")
	admin, err := pgx.Connect(t.Context(), c.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	// works waits for the listener to be back (its reconnect's wake-up)
	// and for the pool to answer again.
	works := func(what string) {
		t.Helper()
		waitWakeup(t, wake, what+": the listener back")
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := s.GetTask(t.Context(), "none")
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the store still fails: %v", what, err)
			}
		}
		fillPool(t, s)
		drain(wake)
	}
	round := func(i int) {
		t.Helper()
		if i%5 == 0 {
			_ = admin.Close(context.Background())
			if err := c.Restart(); err != nil {
				t.Fatal(err)
			}
			var err error
			if admin, err = pgx.Connect(t.Context(), c.AdminURL()); err != nil {
				t.Fatal(err)
			}
		} else if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid()`, s.pool.Config().ConnConfig.Database); err != nil {
			t.Fatal(err)
		}
		works(fmt.Sprintf("outage %d", i))
	}
	round(1)
	base := leakcheck.Take(t)
	for i := 2; i <= 12; i++ {
		round(i)
	}
	base.Settled(t, 10*time.Second, "11 outages")
	leakcheck.BackendsSettled(t, dbURL, int(s.pool.Config().MaxConns)+1, 10*time.Second, "11 outages")
}
