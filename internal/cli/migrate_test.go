package cli

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

// pgExec runs one statement on url.
func pgExec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// migrationRows returns schema_migrations as "version name applied_at" lines.
func migrationRows(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v int
		var name string
		var at time.Time
		if err := rows.Scan(&v, &name, &at); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s %s", v, name, at.Format(time.RFC3339Nano)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigratePostgres: the first `retryq migrate` applies every migration
// and prints the version, a second one changes nothing, and a database
// migrated by a newer binary is refused by both migrate and server.
func TestMigratePostgres(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	known := postgres.KnownVersion()
	want := fmt.Sprintf("postgres schema version %d (this binary knows %d): up to date", known, known)

	status, stdout, stderr := runMain("migrate", "--db", url)
	applied := fmt.Sprintf("postgres: applied %d migration(s), schema version 0 -> %d", known, known)
	if status != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, applied) {
		t.Fatalf("first migrate: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	first := migrationRows(t, url)
	if len(first) != known {
		t.Fatalf("after the first migrate schema_migrations holds %q, want %d rows", first, known)
	}
	// The schema is really there.
	pgExec(t, url, "SELECT id, state, lease_id FROM tasks LIMIT 1")

	status, stdout, stderr = runMain("migrate", "--db", url)
	if status != 0 || !strings.Contains(stdout, want) || strings.Contains(stdout, "applied") {
		t.Fatalf("second migrate: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	if second := migrationRows(t, url); strings.Join(second, "\n") != strings.Join(first, "\n") {
		t.Fatalf("second migrate changed schema_migrations:\nbefore %q\nafter  %q", first, second)
	}

	// A newer binary migrated this database.
	pgExec(t, url, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", known+1, fmt.Sprintf("%04d_from_the_future.sql", known+1))
	tooNew := fmt.Sprintf("schema version %d, this binary knows %d", known+1, known)

	status, stdout, stderr = runMain("migrate", "--db", url)
	if status != 1 || !strings.Contains(stderr, tooNew) || !strings.Contains(stderr, "newer than this binary") ||
		!strings.Contains(stderr, tooNewHint) || strings.Contains(stderr, "open postgres: open postgres") {
		t.Errorf("migrate on a newer schema: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	if rows := migrationRows(t, url); len(rows) != known+1 {
		t.Errorf("refused migrate touched schema_migrations: %q", rows)
	}

	// The server refuses it too, with and without migrating at start.
	for _, extra := range [][]string{nil, {"--no-migrate"}} {
		args := append([]string{"server", "--db", url, "--listen", "127.0.0.1:0"}, extra...)
		status, stderr := runServerToExit(t, args...)
		if status != 1 || !strings.Contains(stderr, tooNew) || !strings.Contains(stderr, "newer than this binary") {
			t.Errorf("retryq %s on a newer schema: status %d\nstderr: %s", strings.Join(args[:1+len(extra)], " "), status, stderr)
		}
	}
}

// TestMigrateConcurrent: nodes migrating the same fresh database at once
// all succeed (the migrations serialize on an advisory lock) and apply each
// migration once.
func TestMigrateConcurrent(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	const n = 3
	var wg sync.WaitGroup
	statuses := make([]int, n)
	outs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var so, se string
			statuses[i], so, se = runMain("migrate", "--db", url)
			outs[i] = so + se
		}()
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != 0 {
			t.Errorf("migrate %d: status %d: %s", i, statuses[i], outs[i])
		}
	}
	if rows := migrationRows(t, url); len(rows) != postgres.KnownVersion() {
		t.Errorf("schema_migrations after concurrent migrates: %q", rows)
	}
}

// TestServerRefusesOldSchema: with --no-migrate the server does not start on
// a database that still needs `retryq migrate`, and says so.
func TestServerRefusesOldSchema(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	status, stderr := runServerToExit(t, "server", "--db", url, "--listen", "127.0.0.1:0", "--no-migrate")
	if status != 1 || !strings.Contains(stderr, "retryq migrate") {
		t.Errorf("server --no-migrate on an empty database: status %d\nstderr: %s", status, stderr)
	}
}

// TestMigrateSQLite: migrate reports the version of a SQLite file (which is
// migrated whenever it is opened), and says what it applied: everything to
// a new file, nothing the second time.
func TestMigrateSQLite(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "q.db")
	known := sqlite.KnownVersion()
	applied := fmt.Sprintf("sqlite: applied %d migration(s), schema version 0 -> %d", known, known)
	for i := range 2 {
		status, stdout, stderr := runMain("migrate", "--db", "sqlite:"+path)
		if status != 0 || !strings.Contains(stdout, "sqlite schema version") || !strings.Contains(stdout, "up to date") {
			t.Fatalf("migrate sqlite: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
		}
		if first := i == 0; strings.Contains(stdout, applied) != first || (!first && strings.Contains(stdout, "applied")) {
			t.Errorf("migrate sqlite, run %d: stdout %q, want %q only the first time", i+1, stdout, applied)
		}
	}
}

// TestMigrateNamesTheDatabaseOnce: a SQLite database that cannot be opened
// is named once in the error, not "open sqlite X: open sqlite X: ...".
func TestMigrateNamesTheDatabaseOnce(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "no-such-dir", "q.db")
	status, _, stderr := runMain("migrate", "--db", "sqlite:"+path)
	if status != exitFailure || strings.Count(stderr, "open sqlite") != 1 || !strings.Contains(stderr, path) {
		t.Errorf("migrate of %s: status %d, stderr %q", path, status, stderr)
	}
}

// TestMigrateConcurrentReportsOneApplier: of several `retryq migrate` run
// at once on a fresh database, only the one that applied the migrations
// says it did; the others waited for its lock and found the schema current.
func TestMigrateConcurrentReportsOneApplier(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	// The migrations' advisory lock (postgres.migrateLockKey), held so that
	// every migrate has read the version before any applies.
	const lockKey int64 = 0x7265747279710001
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	const n = 3
	var wg sync.WaitGroup
	statuses := make([]int, n)
	outs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			var so, se string
			statuses[i], so, se = runMain("migrate", "--db", url)
			outs[i] = so + se
		})
	}
	for waiting := 0; waiting < n; {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d migrate commands wait for the lock", waiting, n)
		}
		if err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling pg_locks
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	known := postgres.KnownVersion()
	applied := fmt.Sprintf("postgres: applied %d migration(s), schema version 0 -> %d", known, known)
	appliers := 0
	for i := range n {
		if statuses[i] != 0 || !strings.Contains(outs[i], "up to date") {
			t.Errorf("migrate %d: status %d: %s", i, statuses[i], outs[i])
		}
		if strings.Contains(outs[i], "applied") {
			appliers++
			if !strings.Contains(outs[i], applied) {
				t.Errorf("migrate %d: %s, want %q", i, outs[i], applied)
			}
		}
	}
	if appliers != 1 {
		t.Errorf("%d migrate commands say they applied migrations, want 1:\n%s", appliers, strings.Join(outs, "\n"))
	}
}

// TestMigrateThroughTransactionPooler: `retryq migrate` through a
// transaction-mode PgBouncer, as docs/operations.md gives it, succeeds on a
// fresh database and again on a current one, with or without
// default_query_exec_mode in the URL. A pooler hands every transaction of a
// client connection to any server connection, so the named statements a
// node prepares at start would collide there ("prepared statement ...
// already exists"); one server connection makes the collision certain.
func TestMigrateThroughTransactionPooler(t *testing.T) {
	clearServerEnv(t)
	direct := pgtest.URL(t)
	through := pgtest.PgBouncer(t, direct, "default_pool_size = 1")
	known := postgres.KnownVersion()
	want := fmt.Sprintf("postgres schema version %d (this binary knows %d): up to date", known, known)
	for i, dsn := range []string{
		through + "&default_query_exec_mode=cache_describe", // the docs' command: applies everything
		through + "&default_query_exec_mode=cache_describe", // and again, on a current schema
		through, // no exec mode in the URL
	} {
		status, stdout, stderr := runMain("migrate", "--db", dsn)
		if status != 0 || !strings.Contains(stdout, want) {
			t.Errorf("migrate %d through the pooler: status %d\nstdout: %s\nstderr: %s", i+1, status, stdout, stderr)
		}
	}
	if rows := migrationRows(t, direct); len(rows) != known {
		t.Errorf("schema_migrations after migrating through the pooler: %q", rows)
	}
}

// TestTooNewSchemaSaysWhatToDo: migrate and server on a SQLite file a
// newer binary migrated exit with status 1, naming both versions and what
// to do (run the newer binary: nothing migrates a schema back).
func TestTooNewSchemaSaysWhatToDo(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "q.db")
	if status, _, stderr := runMain("migrate", "--db", "sqlite:"+path); status != 0 {
		t.Fatalf("migrate: %d %s", status, stderr)
	}
	known := sqlite.KnownVersion()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec("INSERT INTO schema_migrations VALUES (?, ?, 0)", known+1, fmt.Sprintf("%04d_from_the_future", known+1))
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	versions := fmt.Sprintf("database is at version %d, this binary knows %d", known+1, known)
	const hint = "a newer retryq migrated this database: run that version or a later one (a schema is never migrated back)"
	status, _, stderr := runMain("migrate", "--db", "sqlite:"+path)
	if status != exitFailure || !strings.Contains(stderr, versions) || !strings.Contains(stderr, hint) {
		t.Errorf("migrate of a newer schema: status %d, stderr %q; want %q and %q", status, stderr, versions, hint)
	}
	status, stderr = runServerToExit(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0")
	if status != exitFailure || !strings.Contains(stderr, versions) || !strings.Contains(stderr, hint) {
		t.Errorf("server on a newer schema: status %d, stderr %q; want %q and %q", status, stderr, versions, hint)
	}
}
