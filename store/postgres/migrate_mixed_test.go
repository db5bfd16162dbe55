package postgres

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// futureMigration is an additive migration a newer binary might apply
// (columns with defaults, an index, a table), as docs/operations.md allows
// one version's migrations to be; version is the one it records.
func futureMigration(version int) []string {
	return []string{
		`ALTER TABLE tasks ADD COLUMN future_note text NOT NULL DEFAULT ''`,
		`ALTER TABLE attempts ADD COLUMN future_note text`,
		`ALTER TABLE task_types ADD COLUMN future_note text`,
		`CREATE INDEX tasks_future_idx ON tasks (type, created_at)`,
		`CREATE TABLE future_things (id text PRIMARY KEY)`,
		fmt.Sprintf(`INSERT INTO schema_migrations (version, name) VALUES (%d, '%04d_future.sql')`, version, version),
	}
}

// TestOlderNodeKeepsWorkingAfterANewerMigration: a node of this binary,
// running with its statements prepared, keeps serving its tasks after a
// newer binary applied an additive migration under it (new columns in
// tasks, attempts and task_types, an index, a table): the rolling upgrade
// of docs/operations.md, where old nodes run on for a while beside new
// ones. Its statements name their columns, so none changes its result
// type when a table gains one.
func TestOlderNodeKeepsWorkingAfterANewerMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	old := openURL(t, url, nil)
	fx := storetest.NewUpgradeFixture(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	writeUpgradeFixture(t, old, fx, true)
	// Every hot statement has run (and so is prepared) before the
	// migration: the fixture's checks, on tasks of their own.
	if _, err := old.GetTask(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	newer := connect(t, url)
	for _, q := range futureMigration(KnownVersion() + 1) {
		if _, err := newer.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if applied, known, err := old.SchemaVersion(ctx); err != nil || applied != known+1 {
		t.Fatalf("SchemaVersion after the newer migration = %d, %d, %v; want %d", applied, known, err, known+1)
	}
	storetest.CheckUpgradeFixture(ctx, t, old, fx)
}

// withMigrations replaces, until the test ends, the embedded migrations
// with this binary's followed by extra (name and SQL, versions numbered
// on). It changes package state: tests calling it must not be parallel.
func withMigrations(t *testing.T, extra ...[2]string) {
	saved, savedNames := migrations, migrationNames
	t.Cleanup(func() { migrations, migrationNames = saved, savedNames })
	ms := slices.Clone(saved)
	names := slices.Clone(savedNames)
	for _, e := range extra {
		ms = append(ms, migration{version: len(ms) + 1, name: e[0], sql: e[1]})
		names = append(names, e[0])
	}
	migrations, migrationNames = ms, names
}

// TestFailedMigrationHalfwayIsRolledBack: of two new migrations, the
// second fails after statements that changed the schema. The run leaves
// the schema as it found it, the first migration's changes included (all
// pending migrations are one transaction), and once the failing migration
// is fixed the next run applies both.
func TestFailedMigrationHalfwayIsRolledBack(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	known := KnownVersion()
	s := openURL(t, url, func(c *Config) { c.AutoMigrate = false })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	withMigrations(t,
		[2]string{fmt.Sprintf("%04d_first.sql", known+1), `CREATE TABLE future_a (id text PRIMARY KEY)`},
		[2]string{fmt.Sprintf("%04d_second.sql", known+2), `CREATE TABLE future_b (id text);
			ALTER TABLE tasks ADD COLUMN future_note text;
			CREATE INDEX tasks_future_idx ON tasks (type, created_at);
			SELECT 1 / 0`},
	)
	from, to, err := s.Upgrade(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%04d_second.sql", known+2)) {
		t.Fatalf("Upgrade with a failing migration = %d, %d, %v; want its error naming it", from, to, err)
	}
	if applied, _, err := s.SchemaVersion(ctx); err != nil || applied != known {
		t.Errorf("SchemaVersion after the failed run = %d, %v; want %d", applied, err, known)
	}
	var left []string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(name), '{}') FROM (
		SELECT relname::text AS name FROM pg_class WHERE relname IN ('future_a', 'future_b', 'tasks_future_idx')
		UNION ALL SELECT attname::text FROM pg_attribute WHERE attrelid = 'tasks'::regclass AND attname = 'future_note') AS n`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the failed run left %v", left)
	}
	migrations[known+1].sql = strings.Replace(migrations[known+1].sql, "SELECT 1 / 0", "SELECT 1", 1)
	if from, to, err := s.Upgrade(ctx); err != nil || from != known || to != known+2 {
		t.Fatalf("Upgrade once fixed = %d, %d, %v; want %d, %d", from, to, err, known, known+2)
	}
	for _, q := range []string{"SELECT count(*) FROM future_a", "SELECT count(*) FROM future_b", "SELECT count(future_note) FROM tasks"} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Errorf("%s after the fixed run: %v", q, err)
		}
	}
}

// TestMigrationKilledMidwayIsRolledBack: the session applying migration 7
// ends (its process killed, its connection cut) after the new index was
// built, while the migration waits to drop the old one. Nothing of it
// stays: the schema is at version 6 with its old index and no new one, and
// the next run applies the migration cleanly.
func TestMigrationKilledMidwayIsRolledBack(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	s := atVersion(t, url, 6, func(c *Config) { c.MigrateLockTimeout = time.Minute })
	// A reader's transaction: the new index builds beside it, the DROP
	// INDEX of the old one waits for it.
	holder := connect(t, url)
	if _, err := holder.Exec(ctx, "BEGIN; SELECT count(*) FROM tasks"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := s.Upgrade(ctx); done <- err }()
	var pid int32
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no migration waits to drop the old index after 30s")
		}
		err := holder.QueryRow(ctx, `SELECT coalesce(min(pid), 0) FROM pg_locks
			WHERE relation = 'tasks'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling pg_locks
	}
	if _, err := holder.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Upgrade whose session was terminated succeeded")
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	var idx []string
	if err := holder.QueryRow(ctx, `SELECT coalesce(array_agg(indexname ORDER BY indexname), '{}') FROM pg_indexes
		WHERE tablename = 'tasks' AND indexname LIKE 'tasks_pending%'`).Scan(&idx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, []string{"tasks_pending_idx"}) {
		t.Errorf("pending indexes after the killed migration: %v, want version 6's only", idx)
	}
	if applied, _, err := s.SchemaVersion(ctx); err != nil || applied != 6 {
		t.Errorf("SchemaVersion after the killed migration = %d, %v; want 6", applied, err)
	}
	if from, to, err := s.Upgrade(ctx); err != nil || from != 6 || to != KnownVersion() {
		t.Errorf("Upgrade after the killed one = %d, %d, %v; want 6, %d", from, to, err, KnownVersion())
	}
}

// TestConcurrentOpensOfAnEmptyDatabase: three nodes started at once on an
// empty database (Open with AutoMigrate, as `retryq server` does) all
// open it, warmed on the schema one of them applied, each migration once.
func TestConcurrentOpensOfAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	const n = 3
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(ctx, Config{URL: url, AutoMigrate: true, MaxConns: 4}) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		defer s.Close()
		if applied, known, err := s.SchemaVersion(ctx); err != nil || applied != known {
			t.Errorf("SchemaVersion of node %d = %d, %d, %v", i, applied, known, err)
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("n%d-", i), 1), Now: time.Now()}); err != nil {
			t.Errorf("InsertTasks on node %d: %v", i, err)
		}
	}
	var rows, distinct int
	if err := connect(t, url).QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM schema_migrations").Scan(&rows, &distinct); err != nil ||
		rows != KnownVersion() || distinct != KnownVersion() {
		t.Errorf("schema_migrations: %d rows, %d versions (%v); want %d", rows, distinct, err, KnownVersion())
	}
}
