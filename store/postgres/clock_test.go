package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestDatabaseNow: the store reads the server's clock (here on this host,
// so within a minute of ours), successive reads do not go backwards, a
// read works as a lease's Now, and a closed store says so.
func TestDatabaseNow(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx := context.Background()
	first, err := s.DatabaseNow(ctx)
	if err != nil {
		t.Fatalf("DatabaseNow: %v", err)
	}
	if d := time.Since(first); d > time.Minute || d < -time.Minute || first.Location() != time.UTC {
		t.Fatalf("DatabaseNow = %v (%s from this host's clock); want UTC, within a minute", first, d)
	}
	second, err := s.DatabaseNow(ctx)
	if err != nil || second.Before(first) {
		t.Fatalf("second DatabaseNow = %v, %v; want at or after %v", second, err, first)
	}
	l, err := s.AcquireLeader(ctx, store.LeaderParams{Name: "scheduler", NodeID: "n1", TTL: time.Second, Now: second})
	if err != nil || l.NodeID != "n1" || !l.ExpiresAt.Equal(second.Add(time.Second)) {
		t.Fatalf("AcquireLeader at the database's time = %+v, %v; want n1 until %v", l, err, second.Add(time.Second))
	}
	// On the database's timeline the lease is live now and expired a TTL later.
	var live bool
	if err := s.pool.QueryRow(ctx, "SELECT expires_at > now() FROM leader WHERE name = 'scheduler'").Scan(&live); err != nil || !live {
		t.Fatalf("lease live on the database's clock: %v, %v; want true", live, err)
	}
	_ = s.Close()
	if _, err := s.DatabaseNow(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("DatabaseNow after Close: %v; want ErrClosed", err)
	}
}
