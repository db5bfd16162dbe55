package sqlite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store/storetest"
)

// TestOpenStoreKeepsWorkingAfterANewerMigration: a store of this binary,
// open with its statements prepared, keeps serving its tasks after another
// process (a newer binary, as `retryq migrate` run beside the server)
// applied an additive migration to the file (new columns in tasks,
// attempts and task_types, an index, a table). Its statements name their
// columns, and SQLite prepares them again for the new schema.
func TestOpenStoreKeepsWorkingAfterANewerMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	st, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fx := storetest.NewUpgradeFixture(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	newer := rawDB(t, path)
	writeUpgradeFixture(t, newer, fx, true)
	if _, err := st.GetTask(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	rawExec(t, newer,
		`ALTER TABLE tasks ADD COLUMN future_note TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE attempts ADD COLUMN future_note TEXT`,
		`ALTER TABLE task_types ADD COLUMN future_note TEXT`,
		`CREATE INDEX tasks_future ON tasks (type, created_at)`,
		`CREATE TABLE future_things (id TEXT PRIMARY KEY) STRICT`,
		fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, '%04d_future', 0)`, KnownVersion()+1, KnownVersion()+1),
	)
	if applied, known, err := st.SchemaVersion(ctx); err != nil || applied != known+1 {
		t.Fatalf("SchemaVersion after the newer migration = %d, %d, %v; want %d", applied, known, err, known+1)
	}
	storetest.CheckUpgradeFixture(ctx, t, st, fx)
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
// second fails after statements that changed the schema. The open fails
// and leaves the file as it found it, the first migration's changes
// included (all pending migrations are one transaction), and once the
// failing migration is fixed the next open applies both.
func TestFailedMigrationHalfwayIsRolledBack(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	st, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	known := KnownVersion()
	withMigrations(t,
		[2]string{fmt.Sprintf("%04d_first", known+1), `CREATE TABLE future_a (id TEXT PRIMARY KEY)`},
		[2]string{fmt.Sprintf("%04d_second", known+2), `CREATE TABLE future_b (id TEXT);
			ALTER TABLE tasks ADD COLUMN future_note TEXT;
			CREATE INDEX tasks_future ON tasks (type, created_at);
			INSERT INTO no_such_table VALUES (1)`},
	)
	if st, err := Open(ctx, Config{Path: path}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%04d_second", known+2)) {
		if err == nil {
			st.Close()
		}
		t.Fatalf("Open with a failing migration: %v; want its error naming it", err)
	}
	db := rawDB(t, path)
	var version int
	var left string
	if err := db.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil || version != known {
		t.Errorf("schema version after the failed open = %d, %v; want %d", version, err, known)
	}
	if err := db.QueryRow(`SELECT coalesce(group_concat(name), '') FROM (
		SELECT name FROM sqlite_schema WHERE name IN ('future_a', 'future_b', 'tasks_future')
		UNION ALL SELECT name FROM pragma_table_info('tasks') WHERE name = 'future_note')`).Scan(&left); err != nil || left != "" {
		t.Errorf("the failed open left %q (%v)", left, err)
	}
	migrations[known+1].sql = strings.Replace(migrations[known+1].sql, "INSERT INTO no_such_table VALUES (1)", "SELECT 1", 1)
	st, err = Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("Open once fixed: %v", err)
	}
	defer st.Close()
	if applied, _, err := st.SchemaVersion(ctx); err != nil || applied != known+2 || st.OpenedVersion() != known {
		t.Errorf("after the fixed open: version %d (%v), opened at %d; want %d, opened at %d", applied, err, st.OpenedVersion(), known+2, known)
	}
	rawExec(t, db, "SELECT count(*) FROM future_a", "SELECT count(*) FROM future_b", "SELECT count(future_note) FROM tasks")
}

// TestConcurrentOpensOfAnOldFileMigrateOnce: stores opened at once on a
// file at an older version (two servers, or a server and `retryq
// migrate`, started together after an upgrade) all open it; exactly one
// applies the migrations (it found the old version), the others wait for
// its write lock and find the schema current.
func TestConcurrentOpensOfAnOldFileMigrateOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	rawExec(t, db, `CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`,
		migrations[0].sql, fmt.Sprintf(`INSERT INTO schema_migrations VALUES (1, '%s', 0)`, migrations[0].name))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	const n = 3
	opened := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, err := Open(ctx, Config{Path: path})
			if errs[i] = err; err == nil {
				opened[i] = st.OpenedVersion()
				st.Close()
			}
		})
	}
	wg.Wait()
	appliers := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		switch opened[i] {
		case 1:
			appliers++
		case KnownVersion():
		default:
			t.Errorf("Open %d found version %d, want 1 or %d", i, opened[i], KnownVersion())
		}
	}
	if appliers != 1 {
		t.Errorf("opens found versions %v: %d applied the migrations, want 1", opened, appliers)
	}
	var rows int
	if err := rawDB(t, path).QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&rows); err != nil || rows != KnownVersion() {
		t.Errorf("schema_migrations rows = %d, %v; want %d", rows, err, KnownVersion())
	}
}
