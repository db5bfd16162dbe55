package cli

import (
	"regexp"
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

// TestServerStartLineNamesPollOnlyAndNoScheduler: the start-up line says
// when the node runs --poll-only or --no-scheduler, so that an operator can
// tell from the log of a node behind a pooler that it polls, and why a node
// never leads. The line showed neither.
func TestServerStartLineNamesPollOnlyAndNoScheduler(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	s := launchServer(t, "server", "--db", url, "--poll-only", "--no-scheduler", "--listen", "127.0.0.1:0")
	s.started(t)
	line := regexp.MustCompile(`msg="retryq server started".*`).FindString(s.stderr.String())
	if !strings.Contains(line, " poll_only=true") || !strings.Contains(line, " scheduler=false") {
		t.Errorf("start-up line does not name --poll-only and --no-scheduler:\n%s", line)
	}
	plain := launchServer(t, "server", "--db", url, "--listen", "127.0.0.1:0")
	plain.started(t)
	line = regexp.MustCompile(`msg="retryq server started".*`).FindString(plain.stderr.String())
	if strings.Contains(line, "poll_only") || strings.Contains(line, "scheduler=") {
		t.Errorf("start-up line of a node with neither flag names them:\n%s", line)
	}
}
