package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store/postgres"
)

// TestMain stops the shared PostgreSQL cluster (if a test started one) when
// the tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// skewClock is the system clock off by a fixed amount.
type skewClock time.Duration

func (c skewClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// openPG opens a migrated PostgreSQL store on url, closed when t ends.
func openPG(t *testing.T, url string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: url, AutoMigrate: true, ReconnectMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestLeaderElectionUsesDatabaseClock: two nodes on one PostgreSQL
// database, one of whose wall clocks is an hour off (far more than the
// lease's safety margin of TTL/4). The lease is written and checked on the
// database's clock, so while the leader renews, the standby never takes
// the lease; once the leader closes, the standby takes over. With each
// node's own clock as the lease's Now, the standby took the lease at its
// first attempt.
func TestLeaderElectionUsesDatabaseClock(t *testing.T) {
	// Renewals every 1 s, each bounded by 1 s, and a safety margin of 1 s:
	// with a 1 s TTL, three renewals cut off after 250 ms in a row on a
	// loaded machine ended node-a's leadership while the test watched it.
	const ttl = 4 * time.Second
	for _, tc := range []struct {
		name                string
		leaderSkew, stbSkew time.Duration
	}{
		{"standby clock ahead", 0, time.Hour},
		{"leader clock behind", -time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			stA, stB := openPG(t, url), openPG(t, url) // one pool per node
			a := startLeaderEngine(t, stA, "node-a", ttl, skewClock(tc.leaderSkew))
			waitFor(t, "node-a to lead", a.IsLeader)
			b := startLeaderEngine(t, stB, "node-b", ttl, skewClock(tc.stbSkew))

			// Watch for 4 renewal intervals: node-b attempts the lease at
			// each (the first as it starts), and must never get it while
			// node-a renews.
			watchUntil := time.Now().Add(4 * ttl / 4)
			for time.Now().Before(watchUntil) {
				if b.IsLeader() || !a.IsLeader() {
					t.Fatalf("while node-a renews: node-a leads %v, node-b leads %v; want only node-a", a.IsLeader(), b.IsLeader())
				}
				time.Sleep(5 * time.Millisecond)
			}
			var holder string
			var live bool
			err := stA.Pool().QueryRow(context.Background(),
				"SELECT node_id, expires_at > now() FROM leader WHERE name = $1", leaderName).Scan(&holder, &live)
			if err != nil || LeaseHolderNode(holder) != "node-a" || !live {
				t.Fatalf("lease row: holder %q, live %v, err %v; want node-a's live lease", holder, live, err)
			}

			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "node-b to take over after node-a closed", b.IsLeader)
		})
	}
}
