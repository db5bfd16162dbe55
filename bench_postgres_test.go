package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// The engine benchmarks of issue "PostgreSQL backend and many nodes" on a
// throwaway PostgreSQL cluster (internal/pgtest: fsync on,
// synchronous_commit on, everything else at its default; every benchmark
// reads these settings back through its own session, logs them and fails
// on a server whose commits are not durable) with one engine
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
	requireDurable(b, st.Pool())
	return st
}

// errNotDurable reports a server whose commits are not durable: figures
// measured on it would not be comparable to the documented ones.
var errNotDurable = errors.New("server commits are not durable")

// durabilitySettings are the settings that decide what a commit costs and
// whether it survives a crash, as a session of the benchmark sees them.
var durabilitySettings = []string{"server_version", "fsync", "synchronous_commit", "full_page_writes",
	"wal_sync_method", "shared_buffers", "max_connections"}

// checkDurable reads durabilitySettings through q (a session like the
// benchmark's own, so per-database, per-role and connection-string
// overrides count) and returns them as one line, or errNotDurable when
// fsync or full_page_writes is off or synchronous_commit does not wait for
// the local WAL flush.
func checkDurable(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var out strings.Builder
	got := map[string]string{}
	for _, name := range durabilitySettings {
		var v string
		if err := q.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return "", fmt.Errorf("read setting %s: %w", name, err)
		}
		got[name] = v
		fmt.Fprintf(&out, " %s=%s", name, v)
	}
	if got["fsync"] != "on" || got["full_page_writes"] != "on" || got["synchronous_commit"] == "off" {
		return out.String(), fmt.Errorf("check durability:%s: %w", out.String(), errNotDurable)
	}
	return out.String(), nil
}

// requireDurable fails the benchmark unless the server behind q commits
// durably, and logs its settings beside the figures.
func requireDurable(b *testing.B, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) {
	b.Helper()
	line, err := checkDurable(b.Context(), q)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("PostgreSQL:%s", line)
}

// requireDurableURL is requireDurable on a new connection to url.
func requireDurableURL(b *testing.B, url string) {
	b.Helper()
	conn, err := pgx.Connect(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	requireDurable(b, conn)
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
		requireDurableURL(b, url)
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
		if out, err := exec.CommandContext(ctx, bin, "-i", "-q", url).CombinedOutput(); err != nil {
			cancel()
			b.Fatalf("pgbench -i: %v\n%s", err, out)
		}
		tps, out := runPgbench(ctx, b, bin, "-N", "-c", "8", "-j", "2", "-T", "10", "-n", url)
		cancel()
		b.Logf("pgbench -N -c 8 -j 2 -T 10 (%s): %.0f tps\n%s", bin, tps, out)
		b.ReportMetric(tps, "tps")
	}
}

// runPgbench runs pgbench with args and returns its transactions per
// second (without connection time) and its output.
func runPgbench(ctx context.Context, b *testing.B, bin string, args ...string) (float64, []byte) {
	b.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PGAPPNAME=retryq-bench")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("pgbench %v: %v\n%s", args, err, out)
	}
	m := tpsRE.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no tps in pgbench output:\n%s", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		b.Fatalf("pgbench tps %q: %v", m[1], err)
	}
	return tps, out
}

// streamFloorScript is one cycle of the stream workload's writes as the
// server sees them, with no client work at all: 8 tasks inserted already
// leased (the engine's dispatch at insert) and the 8 tasks of the previous
// cycle marked succeeded, in one implicit transaction sent as one pipeline,
// so one round trip and one durable commit. The counter n (client-side)
// makes ids that grow, like the engine's.
const streamFloorScript = `\set n :n + 1
\startpipeline
INSERT INTO tasks (id, type, payload, priority, effective_prio, state, max_attempts,
	run_at, created_at, updated_at, attempt, lease_id, lease_expires_at, worker_id, started_at)
SELECT i.id, 'bench', '\x7b2274223a313738303030303030303030303030307d', 0, 0, 'running', 3,
	now(), now(), now(), 1, 'f0e1d2c3b4a5968778695a4b3c2d1e0f.' || i.id, now() + interval '30 seconds', 'bench-host-1234', now()
FROM unnest(ARRAY[%s]::text[]) AS i(id);
UPDATE tasks SET state = 'succeeded', lease_id = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = ANY(ARRAY[%s]::text[]) AND (state || '') = 'running';
\endpipeline
`

// writeStreamFloorScript writes streamFloorScript, with the ids of each
// cycle filled in, to a file in dir and returns its path.
func writeStreamFloorScript(dir string) (string, error) {
	// ids are the 8 task ids of cycle n (a pgbench expression).
	ids := func(n string) string {
		out := make([]string, 8)
		for i := range out {
			out[i] = fmt.Sprintf("lpad((%s)::text, 12, '0') || '%c'", n, 'a'+i)
		}
		return strings.Join(out, ", ")
	}
	script := filepath.Join(dir, "stream-floor.sql")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(streamFloorScript, ids(":n"), ids(":n - 1"))), 0o600); err != nil {
		return "", fmt.Errorf("write stream floor script: %w", err)
	}
	return script, nil
}

// BenchmarkPgbenchStreamFloor runs streamFloorScript with pgbench on one
// connection for 10 s against a fresh, migrated database of the test
// cluster and reports 8 × its transactions per second: what the stream
// workload could reach if the engine's own work cost nothing, since each
// of its commits carries at most one enqueue per producer (8).
func BenchmarkPgbenchStreamFloor(b *testing.B) {
	bin, ok := findPgbench()
	if !ok {
		b.Skip("pgbench not found (it ships with the PostgreSQL client tools): skipping the floor")
	}
	script, err := writeStreamFloorScript(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		url := pgtest.URL(b)
		logFsync(b, b.TempDir())
		ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
		st, err := postgres.Open(ctx, postgres.Config{URL: url, AutoMigrate: true})
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		requireDurable(b, st.Pool())
		st.Close()
		tps, _ := runPgbench(ctx, b, bin, "-n", "-M", "prepared", "-c", "1", "-T", "10", "-D", "n=0", "-f", script, url)
		cancel()
		b.Logf("stream floor (one connection, 8 inserts + 8 updates per commit, no client work): %.0f commits/s = %.0f tasks/s", tps, 8*tps)
		b.ReportMetric(8*tps, "tasks/s")
	}
}

// TestBenchDurabilityCheckRefusesAsyncCommit pins the guard of the
// PostgreSQL benchmarks: the test cluster passes, and a database set to
// synchronous_commit=off (which would let a benchmark report commit rates
// no durable server reaches) is refused with errNotDurable.
func TestBenchDurabilityCheckRefusesAsyncCommit(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	line, err := checkDurable(ctx, conn)
	if err != nil {
		conn.Close(ctx)
		t.Fatalf("the test cluster: %v", err)
	}
	if !strings.Contains(line, " fsync=on") || !strings.Contains(line, " synchronous_commit=on") {
		t.Errorf("settings line %q does not show fsync and synchronous_commit on", line)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := checkDurable(ctx, conn); !errors.Is(err, errNotDurable) {
		t.Errorf("synchronous_commit=off: checkDurable = %v, want errNotDurable", err)
	}
}

// TestStreamFloorScriptWritesWhatItClaims runs the stream floor's pgbench
// script for 5 cycles (not timed) and checks that each cycle inserts 8
// running tasks and marks the previous cycle's 8 succeeded: an UPDATE that
// matched no row would make the floor a commit of inserts alone, a
// flattering yardstick.
func TestStreamFloorScriptWritesWhatItClaims(t *testing.T) {
	bin, ok := findPgbench()
	if !ok {
		t.Skip("pgbench not found (it ships with the PostgreSQL client tools)")
	}
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: url, AutoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	script, err := writeStreamFloorScript(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", "1", "-t", "5", "-D", "n=0", "-f", script, url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v\n%s", err, out)
	}
	var running, succeeded int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'),
		count(*) FILTER (WHERE state = 'succeeded') FROM tasks`).Scan(&running, &succeeded); err != nil {
		t.Fatal(err)
	}
	if running != 8 || succeeded != 32 {
		t.Errorf("after 5 cycles: %d running, %d succeeded; want 8 and 32", running, succeeded)
	}
}
