package retryq_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// The engine benchmarks of issue "PostgreSQL backend and many nodes" on a
// throwaway PostgreSQL cluster (internal/pgtest: fsync on,
// synchronous_commit on, everything else at its default) with one engine
// and 50 concurrent no-op handlers, plus pgbench's simple-update run as the
// yardstick of what the server and disk sustain. Run them with
//
//	go test -run '^$' -bench 'Postgres|Pgbench' -benchtime 1x .
//
// Set RETRYQ_TEST_POSTGRES_URL to benchmark another server.

func openBenchPostgres(b *testing.B) store.Store {
	b.Helper()
	// The throwaway cluster lives under the system temp directory too: the
	// probe measures the disk its WAL is flushed to (with
	// RETRYQ_TEST_POSTGRES_URL set, only if that server shares this disk).
	logFsync(b, b.TempDir())
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: pgtest.URL(b), AutoMigrate: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	logServerSettings(b, st)
	return st
}

var loggedSettings bool

// logServerSettings logs, once, the settings that decide commit cost.
func logServerSettings(b *testing.B, st *postgres.Store) {
	if loggedSettings {
		return
	}
	loggedSettings = true
	var out string
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers", "max_connections"} {
		var v string
		if err := st.Pool().QueryRow(b.Context(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
			b.Fatalf("read setting %s: %v", name, err)
		}
		out += fmt.Sprintf(" %s=%s", name, v)
	}
	b.Logf("PostgreSQL:%s", out)
}

func BenchmarkPostgres(b *testing.B) { runWorkloads(b, openBenchPostgres) }

func BenchmarkPostgresScale(b *testing.B) { runScale(b, openBenchPostgres) }

// findPgbench returns the pgbench binary: on PATH, else next to the
// PostgreSQL server binaries (newest version first).
func findPgbench() (string, bool) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, true
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	if len(dirs) > 0 {
		return dirs[0], true
	}
	return "", false
}

var tpsRE = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// BenchmarkPgbench runs pgbench's simple-update script (-N: one UPDATE of
// pgbench_accounts, one SELECT and one INSERT into pgbench_history per
// transaction, each a durable commit) with 8 clients for 10 s against a
// fresh database of the same test cluster, and reports its transactions
// per second: the yardstick for the engine's commit rates.
func BenchmarkPgbench(b *testing.B) {
	bin, ok := findPgbench()
	if !ok {
		b.Skip("pgbench not found (it ships with the PostgreSQL client tools): skipping the yardstick")
	}
	for i := 0; i < b.N; i++ {
		url := pgtest.URL(b)
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
		if out, err := exec.CommandContext(ctx, bin, "-i", "-q", url).CombinedOutput(); err != nil {
			cancel()
			b.Fatalf("pgbench -i: %v\n%s", err, out)
		}
		cmd := exec.CommandContext(ctx, bin, "-N", "-c", "8", "-j", "2", "-T", "10", "-n", url)
		cmd.Env = append(os.Environ(), "PGAPPNAME=retryq-bench")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			b.Fatalf("pgbench -N: %v\n%s", err, out)
		}
		m := tpsRE.FindSubmatch(out)
		if m == nil {
			b.Fatalf("no tps in pgbench output:\n%s", out)
		}
		tps, _ := strconv.ParseFloat(string(m[1]), 64)
		b.Logf("pgbench -N -c 8 -j 2 -T 10 (%s): %.0f tps\n%s", bin, tps, out)
		b.ReportMetric(tps, "tps")
	}
}
