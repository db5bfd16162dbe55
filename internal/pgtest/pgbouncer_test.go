package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPgBouncer checks the bouncer pools in transaction mode (one client
// connection's transactions run on different server connections) and is
// stopped when its test ends.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := URL(t)
	var url string
	t.Run("pool", func(t *testing.T) {
		url = PgBouncer(t, db, "default_pool_size = 2", "server_round_robin = 1")
		c1, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close(ctx)
		c2, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close(ctx)
		// Two open transactions need both server connections.
		for _, c := range []*pgx.Conn{c1, c2} {
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []*pgx.Conn{c1, c2} {
			if _, err := c.Exec(ctx, "COMMIT"); err != nil {
				t.Fatal(err)
			}
		}
		pids := map[uint32]bool{}
		for range 4 {
			var pid uint32
			var dbName string
			// Simple protocol: no prepared statements behind the pooler.
			if err := c1.QueryRow(ctx, "SELECT pg_backend_pid(), current_database()",
				pgx.QueryExecModeSimpleProtocol).Scan(&pid, &dbName); err != nil {
				t.Fatal(err)
			}
			if want := dbNameOf(t, db); dbName != want {
				t.Fatalf("connected to database %s, want %s", dbName, want)
			}
			pids[pid] = true
		}
		if len(pids) != 2 {
			t.Fatalf("one client connection ran on %d server connections, want 2", len(pids))
		}
	})
	if url == "" || t.Failed() {
		return // skipped or failed
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if conn, err := pgx.Connect(cctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("pgbouncer still accepts connections after its test ended")
	}
}

func dbNameOf(t *testing.T, u string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}
