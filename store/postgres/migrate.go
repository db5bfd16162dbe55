package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded migrations, ordered by version. File names are
// NNNN_description.sql with NNNN = 1, 2, 3, ... without gaps. A released
// migration's file name never changes: schema_migrations records it, and
// historyVersion takes a history naming other files for another tool's.
var migrations = func() []migration {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(err)
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("postgres: bad migration file name " + e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			panic(fmt.Sprintf("postgres: migration %s: want version %d", m.name, i+1))
		}
	}
	return ms
}()

// migrationNames are the names of migrations, in version order.
var migrationNames = func() []string {
	names := make([]string, len(migrations))
	for i, m := range migrations {
		names[i] = m.name
	}
	return names
}()

// migrateLockKey is the advisory lock serializing migrations of concurrent
// nodes ("retryq" in ASCII).
const migrateLockKey int64 = 0x7265747279710001

// ErrMigrationLockTimeout is wrapped (with store.ErrUnavailable) by Migrate
// and Upgrade when a migration waited longer than its lock timeout
// (Config.MigrateLockTimeout) for a lock another session holds on a table
// the migration changes. The migration rolled back; run it again once that
// session's transaction ends (pg_locks and pg_stat_activity show it).
var ErrMigrationLockTimeout = errors.New("a migration waited too long for a lock another session holds on a table it changes (a long-running transaction or query)")

// KnownVersion is the newest schema version this binary knows.
func KnownVersion() int { return len(migrations) }

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies pending migrations in one transaction holding an advisory
// lock, so several nodes may migrate at once: the first applies, the others
// wait and find nothing to do. It refuses a database whose schema is newer
// than this binary (store.ErrSchemaTooNew) and a schema_migrations table
// retryq did not write (store.ErrForeignSchema).
func (s *Store) Migrate(ctx context.Context) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	_, _, err := s.Upgrade(ctx)
	return err
}

// Upgrade is Migrate, reporting the schema version it found (under the
// migration lock, so after any concurrent migration) and the version it
// left: from == to when it applied nothing. A current schema is left alone
// without taking the lock or running DDL, so a role without the CREATE
// privilege may open it with AutoMigrate.
func (s *Store) Upgrade(ctx context.Context) (from, to int, err error) {
	const op = "migrate schema"
	if err := store.CheckContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", op, err)
	}
	applied, known, err := s.SchemaVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", op, err)
	}
	if applied > known {
		return 0, 0, fmt.Errorf("%s: schema version %d, this binary knows %d: %w", op, applied, known, store.ErrSchemaTooNew)
	}
	if applied == known {
		return applied, applied, nil
	}
	err = s.inTx(ctx, op, func(tx pgx.Tx) error {
		// A node waits for another's migration however long it takes (the
		// session's lock_timeout, if any, is lifted for that wait); the
		// lock timeout applies to the migration's statements only.
		var session string
		if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', '0', true)").Scan(&session, new(string)); err != nil {
			return fmt.Errorf("read lock_timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		lockTimeout := s.migrateLockTimeout(session)
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", lockTimeout); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
		// IF NOT EXISTS, not to_regclass: a lookup without a lock on the
		// table may miss one a concurrent migration created while this one
		// waited for the lock.
		if _, err := tx.Exec(ctx, createMigrationsTable); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "3F000" { // invalid_schema_name
				return fmt.Errorf("no schema of the search_path exists (create the schema the URL's search_path names): %w", err)
			}
			return err
		}
		var err error
		if from, err = historyVersion(ctx, tx); err != nil {
			return err
		}
		if from > len(migrations) {
			return fmt.Errorf("schema version %d, this binary knows %d: %w", from, len(migrations), store.ErrSchemaTooNew)
		}
		for _, m := range migrations[from:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
					return fmt.Errorf("apply %s: %w (lock_timeout %s): %w", m.name, ErrMigrationLockTimeout, lockTimeout, err)
				}
				return fmt.Errorf("apply %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return fmt.Errorf("record %s: %w", m.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return from, len(migrations), nil
}

// migrateLockTimeout returns the lock_timeout of a migration's
// statements, set for its transaction only (set_config's is_local, as SET
// LOCAL, so nothing outlives it through a transaction-mode pooler):
// Config.MigrateLockTimeout when set, else the session's own lock_timeout
// (session, as current_setting shows it) when it has one, else
// DefaultMigrateLockTimeout.
func (s *Store) migrateLockTimeout(session string) string {
	if d := s.cfg.MigrateLockTimeout; d > 0 {
		return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
	}
	if session != "" && session != "0" {
		return session
	}
	return strconv.FormatInt(DefaultMigrateLockTimeout.Milliseconds(), 10) + "ms"
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// hasHistory reports whether schema_migrations is on the search path.
func hasHistory(ctx context.Context, q querier) (bool, error) {
	var exists bool
	err := q.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists)
	return exists, err
}

// historyVersion returns the applied schema version recorded in
// schema_migrations, after checking that retryq wrote the table: it has a
// name column, and its rows up to the version this binary knows are
// exactly this binary's migrations, from 1 without gaps. Another tool's
// table of the same name (golang-migrate, dbmate, Ecto, Rails all use it)
// is store.ErrForeignSchema: its version is not retryq's, and taking it
// for one would call the database newer than the binary, call it current,
// or apply later migrations to tables retryq never created.
func historyVersion(ctx context.Context, q querier) (int, error) {
	rows, err := q.Query(ctx, "SELECT version, name FROM schema_migrations ORDER BY version")
	var history []store.HistoryRow
	if err == nil {
		history, err = pgx.CollectRows(rows, pgx.RowToStructByPos[store.HistoryRow])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column
		return 0, fmt.Errorf("%w (%s)", store.ErrForeignSchema, pgErr.Message)
	}
	if err != nil {
		return 0, err
	}
	return store.HistoryVersion(history, migrationNames)
}

// SchemaVersion reports the applied schema version (0 for an empty
// database) and the newest version this binary knows. A schema_migrations
// table retryq did not write is store.ErrForeignSchema.
func (s *Store) SchemaVersion(ctx context.Context) (applied, known int, err error) {
	const op = "get schema version"
	if err := store.CheckContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return 0, 0, err
	}
	exists, err := hasHistory(ctx, s.pool)
	if err != nil {
		return 0, 0, translate(op, err)
	}
	if exists {
		if applied, err = historyVersion(ctx, s.pool); err != nil {
			return 0, 0, translate(op, err)
		}
	}
	return applied, len(migrations), nil
}
