package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

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
// NNNN_description.sql with NNNN = 1, 2, 3, ... without gaps.
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

// migrateLockKey is the advisory lock serializing migrations of concurrent
// nodes ("retryq" in ASCII).
const migrateLockKey int64 = 0x7265747279710001

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
// than this binary (store.ErrSchemaTooNew).
func (s *Store) Migrate(ctx context.Context) error {
	return s.inTx(ctx, "migrate schema", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, createMigrationsTable); err != nil {
			return err
		}
		var applied int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&applied); err != nil {
			return err
		}
		if applied > len(migrations) {
			return fmt.Errorf("schema version %d, this binary knows %d: %w", applied, len(migrations), store.ErrSchemaTooNew)
		}
		for _, m := range migrations[applied:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}

// SchemaVersion reports the applied schema version (0 for an empty
// database) and the newest version this binary knows.
func (s *Store) SchemaVersion(ctx context.Context) (applied, known int, err error) {
	if err := s.check("get schema version"); err != nil {
		return 0, 0, err
	}
	var exists bool
	err = s.pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists)
	if err != nil {
		return 0, 0, translate("get schema version", err)
	}
	if exists {
		err = s.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&applied)
		if err != nil {
			return 0, 0, translate("get schema version", err)
		}
	}
	return applied, len(migrations), nil
}
