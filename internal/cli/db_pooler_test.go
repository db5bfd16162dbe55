package cli

import (
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/pgtest"
)

// TestServerThroughPoolerWithoutPollOnlySaysSo: a server started through a
// transaction-mode PgBouncer without --poll-only fails at start, and its
// error says to use --poll-only. It said only 'prepared statement
// "stmt_…" already exists (SQLSTATE 42P05)', which names neither the
// pooler nor the flag.
func TestServerThroughPoolerWithoutPollOnlySaysSo(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	if status, stdout, stderr := runMain("migrate", "--db", url); status != 0 {
		t.Fatalf("migrate: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	// One server connection: the start's connections, each preparing the
	// same statements, share it.
	pooled := pgtest.PgBouncer(t, url, "default_pool_size = 1")
	status, stderr := runServerToExit(t, "server", "--db", pooled, "--no-migrate", "--listen", "127.0.0.1:0")
	if status != 1 || !strings.Contains(stderr, "already exists") || !strings.Contains(stderr, "--poll-only") {
		t.Fatalf("server through the pooler: status %d; want 1 and a hint naming --poll-only\nstderr: %s", status, stderr)
	}
}
