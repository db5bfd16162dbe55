package postgres

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestPingFailsWhenTheServerRefusesWrites: Ping, which backs the server's
// /readyz, fails with store.ErrUnavailable when the database answers but
// refuses writes (here default_transaction_read_only, as an operator sets
// for maintenance; a hot standby or a primary demoted by a failover looks
// the same to a session), and passes again once it accepts them. It used
// to pass, so a load balancer kept sending enqueues to a node whose every
// write failed with 503.
func TestPingFailsWhenTheServerRefusesWrites(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	x := connect(t, dbURL)
	s := openURL(t, dbURL, nil)
	ctx := t.Context()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on a writable database: %v", err)
	}
	setDatabase(t, x, "default_transaction_read_only", "on")
	s.Pool().Reset() // new sessions have the setting
	// The write fails as the server's enqueues do...
	_, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("ro", 1), Now: time.Now()})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("InsertTasks on a read-only database: %v, want ErrUnavailable", err)
	}
	// ...and Ping says so.
	err = s.Ping(ctx)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping on a read-only database: %v, want ErrUnavailable", err)
	}
	t.Logf("Ping on a read-only database: %v", err)
	setDatabase(t, x, "default_transaction_read_only", "off")
	s.Pool().Reset()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping once writable again: %v", err)
	}
}

// TestWritesResumeOnceTheServerAcceptsThemAgain: sessions opened while the
// server refused writes (here default_transaction_read_only set on the
// database and its sessions ended, as a failover to a standby or a
// maintenance window does) keep refusing them after the server accepts
// writes again, for as long as they live. The store used to keep them in
// its pool, up to the pool's hour-long connection lifetime: every enqueue
// and outcome failed with "cannot execute ... in a read-only transaction"
// and /readyz said not ready long after the cause was gone. A session
// that refuses a write, or that Ping finds read-only, is now closed
// instead of going back to the pool, so the next call opens a new one.
func TestWritesResumeOnceTheServerAcceptsThemAgain(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	x := connect(t, dbURL)
	s := openURL(t, dbURL, func(c *Config) { c.MaxConns = 4 })
	ctx := t.Context()
	insert := func(prefix string) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(prefix, 1), Now: time.Now()})
		return err
	}
	setDatabase(t, x, "default_transaction_read_only", "on")
	// End the store's sessions, as a failover or a restart does.
	if _, err := x.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with read-only sessions: calls, some concurrent, until
	// they fail for the read-only server rather than for the ended sessions.
	readOnlySeen := false
	for i := 0; i < 200 && !readOnlySeen; i++ {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if j%2 == 0 {
					errs[j] = insert(fmt.Sprintf("ro%d_%d_", i, j))
				} else {
					errs[j] = s.Ping(ctx)
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err == nil {
				t.Fatal("a call succeeded on a read-only database")
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("call on a read-only database: %v, want ErrUnavailable", err)
			}
			if errors.Is(err, ErrReadOnly) || strings.Contains(err.Error(), "read-only") {
				readOnlySeen = true
			}
		}
	}
	if !readOnlySeen {
		t.Fatal("no call failed for the read-only server")
	}
	setDatabase(t, x, "default_transaction_read_only", "off")
	var err error
	for deadline, i := time.Now().Add(10*time.Second), 0; time.Now().Before(deadline) && i < 1000; i++ {
		if err = insert(fmt.Sprintf("rw%d_", i)); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("InsertTasks once the server accepts writes again: %v", err)
	}
	for i := 0; i < 8; i++ { // every session of the pool
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping once the server accepts writes again: %v", err)
		}
		if err := insert(fmt.Sprintf("rw_after%d_", i)); err != nil {
			t.Fatalf("InsertTasks once the server accepts writes again: %v", err)
		}
	}
}
