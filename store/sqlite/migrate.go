package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded migrations in version order; version n is the
// file whose name starts with the zero-padded number n. A released
// migration's file name never changes: schema_migrations records it, and
// historyVersion takes a history naming other files for another tool's.
var migrations = mustLoadMigrations()

// migrationNames are the names of migrations, in version order.
var migrationNames = func() []string {
	names := make([]string, len(migrations))
	for i, m := range migrations {
		names[i] = m.name
	}
	return names
}()

func mustLoadMigrations() []migration {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			panic("sqlite: bad migration file name " + base)
		}
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			panic(fmt.Sprintf("sqlite: migrations are not contiguous: %s is number %d", m.name, i+1))
		}
	}
	return ms
}

// KnownVersion is the newest schema version this binary knows.
func KnownVersion() int { return len(migrations) }

// migrate applies the pending migrations in one IMMEDIATE transaction, the
// creation of schema_migrations included: a migration that fails leaves
// the file as it was. It records the version it found in s.opened.
func (s *Store) migrate(ctx context.Context) error {
	const op = "migrate sqlite schema"
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return s.translate(op, err)
	}
	applied, err := historyVersion(ctx, tx)
	if err != nil {
		return s.translate(op, err)
	}
	if applied > len(migrations) {
		return fmt.Errorf("%s: %w: database is at version %d, this binary knows %d", op, store.ErrSchemaTooNew, applied, len(migrations))
	}
	// A file that may not be written opens, and answers reads (and so
	// pings), but every write fails: refuse it now. This statement changes
	// nothing but needs write access.
	if _, err := tx.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version < 0`); err != nil {
		return s.translate(op, err)
	}
	for _, m := range migrations[applied:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return s.translate(op+" "+m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UnixMicro()); err != nil {
			return s.translate(op+" "+m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.translate(op, err)
	}
	s.opened = applied
	return nil
}

// refuseForeign refuses, with store.ErrForeignSchema, a file whose
// schema_migrations table another tool wrote (see historyVersion) before
// Open changes anything in it: the switch to WAL mode rewrites the file's
// header, and a file retryq does not own is left exactly as it was. migrate
// checks again, under its write lock, for a table created meanwhile.
func (s *Store) refuseForeign(ctx context.Context) error {
	const op = "migrate sqlite schema"
	var n int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil {
		return s.translate(op, err)
	}
	if n == 0 {
		return nil
	}
	if _, err := historyVersion(ctx, s.w); errors.Is(err, store.ErrForeignSchema) {
		return s.translate(op, err)
	}
	return nil
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// historyVersion returns the applied schema version recorded in
// schema_migrations, after checking that retryq wrote the table: it has a
// name column, and its rows up to the version this binary knows are
// exactly this binary's migrations, from 1 without gaps. Another tool's
// table of the same name (golang-migrate, dbmate and others use it) is
// store.ErrForeignSchema: its version is not retryq's, and taking it for
// one would call the file newer than the binary, call it current, or apply
// later migrations to tables retryq never created.
func historyVersion(ctx context.Context, q querier) (int, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		if strings.Contains(err.Error(), "no such column") {
			return 0, fmt.Errorf("%w (%w)", store.ErrForeignSchema, err)
		}
		return 0, err
	}
	defer rows.Close()
	var history []store.HistoryRow
	for rows.Next() {
		var r store.HistoryRow
		if err := rows.Scan(&r.Version, &r.Name); err != nil {
			return 0, fmt.Errorf("%w (%w)", store.ErrForeignSchema, err)
		}
		history = append(history, r)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return store.HistoryVersion(history, migrationNames)
}

// OpenedVersion is the schema version the database had when Open found it,
// before Open applied the pending migrations (0 for a new file).
func (s *Store) OpenedVersion() int { return s.opened }

// SchemaVersion implements store.Store.
func (s *Store) SchemaVersion(ctx context.Context) (applied, known int, err error) {
	if err := store.CheckContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("get schema version: %w", err)
	}
	if err := s.check("get schema version"); err != nil {
		return 0, 0, err
	}
	if applied, err = historyVersion(ctx, s.r); err != nil {
		return 0, 0, s.translate("get schema version", err)
	}
	return applied, len(migrations), nil
}
