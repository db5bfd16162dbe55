package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// rawDB opens path without the store, as another tool or an older retryq
// would; it is closed when the test ends.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// rawExec runs statements on db, failing the test on the first error.
func rawExec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestUpgradeFromEveryVersionKeepsData builds a database at each older
// schema version the way that version's binary left it (its migrations
// recorded in schema_migrations), with tasks in every state, their history
// and task types in that version's layout (storetest.UpgradeFixture), and
// checks that Open upgrades it to the current version, every record reads
// back the same and the tasks still work.
func TestUpgradeFromEveryVersionKeepsData(t *testing.T) {
	ctx := t.Context()
	fx := storetest.NewUpgradeFixture(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	for v := 1; v < KnownVersion(); v++ {
		t.Run(fmt.Sprintf("from_%d", v), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			db := rawDB(t, path)
			rawExec(t, db, `CREATE TABLE schema_migrations (
				version    INTEGER NOT NULL PRIMARY KEY,
				name       TEXT    NOT NULL,
				applied_at INTEGER NOT NULL
			) STRICT`)
			for _, m := range migrations[:v] {
				rawExec(t, db, m.sql, fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, '%s', 0)`, m.version, m.name))
			}
			// Before success_in_task_row (2) the success is an attempts
			// row; after it, the task row's detail.
			writeUpgradeFixture(t, db, fx, v >= 2)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			st, err := Open(ctx, Config{Path: path})
			if err != nil {
				t.Fatalf("Open of a version-%d database: %v", v, err)
			}
			defer st.Close()
			if applied, known, err := st.SchemaVersion(ctx); err != nil || applied != known {
				t.Fatalf("SchemaVersion after the upgrade = %d, %d, %v", applied, known, err)
			}
			if st.OpenedVersion() != v {
				t.Errorf("OpenedVersion = %d, want %d", st.OpenedVersion(), v)
			}
			storetest.CheckUpgradeFixture(ctx, t, st, fx)
		})
	}
}

// writeUpgradeFixture writes fx's rows into db in the layout of the first
// schema versions (every one so far adds to it, none changes it); with
// successInRow, the success is the task row's detail, else an attempts row.
func writeUpgradeFixture(t *testing.T, db *sql.DB, fx storetest.UpgradeFixture, successInRow bool) {
	t.Helper()
	micro := func(at time.Time) any {
		if at.IsZero() {
			return nil
		}
		return at.UnixMicro()
	}
	text := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	blob := func(b []byte) any {
		if len(b) == 0 {
			return nil
		}
		return b
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tk := range fx.Tasks {
		var code, msg, class any
		if e := tk.LastError; e != nil {
			code, msg, class = e.Code, e.Message, e.Class
		}
		exec(`INSERT INTO tasks (id, type, payload, priority, effective_prio, state, attempt, max_attempts, idempotency_key,
			run_at, created_at, updated_at, first_failure_at, last_error_code, last_error_message, last_error_class,
			last_delay, dead_reason, lease_id, lease_expires_at, worker_id, started_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			tk.ID, tk.Type, []byte(tk.Payload), tk.Priority, tk.EffectivePrio, string(tk.State), tk.Attempt, tk.MaxAttempts,
			text(tk.IdempotencyKey), micro(tk.RunAt), micro(tk.CreatedAt), micro(tk.UpdatedAt), micro(tk.FirstFailureAt),
			code, msg, class, int64(tk.LastDelay), tk.DeadReason, text(tk.LeaseID), micro(tk.LeaseExpiresAt), tk.WorkerID,
			micro(tk.StartedAt))
	}
	attempts := fx.Attempts
	if successInRow {
		exec(`UPDATE tasks SET success_detail = ? WHERE id = ?`, fx.Success.Detail, fx.Success.TaskID)
	} else {
		attempts = append(attempts[:len(attempts):len(attempts)], fx.Success)
	}
	for _, a := range attempts {
		var code, msg, class any
		if e := a.Error; e != nil {
			code, msg, class = e.Code, e.Message, e.Class
		}
		exec(`INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at, outcome,
			error_code, error_message, error_class, delay, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.TaskID, a.TaskType, a.Number, a.WorkerID, micro(a.StartedAt), micro(a.FinishedAt), a.Outcome,
			code, msg, class, int64(a.Delay), a.Detail)
	}
	for _, tc := range fx.Types {
		exec(`INSERT INTO task_types (type, policy, timeout, priority, target, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
			tc.Type, blob(tc.Policy), int64(tc.Timeout), tc.Priority, blob(tc.Target), micro(tc.UpdatedAt))
	}
}

// TestOpenRefusesAnotherToolsHistory: a file whose schema_migrations table
// another migration tool wrote (here golang-migrate's layout) is refused
// with store.ErrForeignSchema, whatever version that tool recorded, and
// left as it was (in its journal mode too): not called newer than the binary, not called current,
// and no retryq migration applied to it.
func TestOpenRefusesAnotherToolsHistory(t *testing.T) {
	for _, version := range []int64{2, int64(KnownVersion()), 20240101120000} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "app.db")
			db := rawDB(t, path)
			rawExec(t, db, `CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`,
				fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, 0)`, version))
			s, err := Open(t.Context(), Config{Path: path})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, store.ErrForeignSchema) || errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "schema_migrations") {
				t.Fatalf("Open: %v, want ErrForeignSchema naming schema_migrations", err)
			}
			var tables []string
			rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					t.Fatal(err)
				}
				tables = append(tables, name)
			}
			if fmt.Sprint(tables) != "[schema_migrations]" {
				t.Errorf("tables after the refused open: %v, want only the other tool's", tables)
			}
			// Nor switched to WAL mode, which rewrites the file's header
			// (bytes 18 and 19, the file format versions: 1 for a rollback
			// journal, 2 for WAL) and which the other tool may not expect.
			header := make([]byte, 20)
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := io.ReadFull(f, header); err != nil {
				t.Fatal(err)
			}
			if header[18] != 1 || header[19] != 1 {
				t.Errorf("file format versions after the refused open: %d %d, want 1 1 (rollback journal, as the other tool left it)", header[18], header[19])
			}
		})
	}
}

// TestFailedMigrationLeavesNoTrace: a file another application owns, with
// a tasks table of its own, is refused (migration 1 cannot create retryq's)
// and keeps exactly its tables: no half-applied migration and no empty
// schema_migrations left behind.
func TestFailedMigrationLeavesNoTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := rawDB(t, path)
	rawExec(t, db, `CREATE TABLE tasks (title TEXT)`, `INSERT INTO tasks VALUES ('buy milk')`)
	s, err := Open(t.Context(), Config{Path: path})
	if err == nil {
		s.Close()
		t.Fatal("Open of another application's database with a tasks table succeeded")
	}
	if !strings.Contains(err.Error(), "0001_init") {
		t.Errorf("Open: %v, want the failing migration named", err)
	}
	var tables string
	if err := db.QueryRow(`SELECT group_concat(name) FROM sqlite_schema`).Scan(&tables); err != nil || tables != "tasks" {
		t.Errorf("schema after the failed migration: %q (%v), want only the application's tasks table", tables, err)
	}
}
