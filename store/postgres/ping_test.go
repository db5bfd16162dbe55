package postgres

import (
	"errors"
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
