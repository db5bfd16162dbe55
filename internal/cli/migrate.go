package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

func init() {
	register(&command{name: "migrate", summary: "apply database migrations and report the schema version", run: runMigrate})
}

const migrateUsage = `Usage: retryq migrate [--db DSN]

Applies the embedded schema migrations to the database, says how many it
applied, and prints the applied and known schema versions. SQLite
databases are migrated whenever they are opened (here too); PostgreSQL
databases are migrated here, or by the server unless it runs with
"retryq server --no-migrate". Of several migrate commands run at once, one
applies the migrations and the others wait for it. A database newer than
this binary is refused, and so is a schema_migrations table another tool
wrote. On PostgreSQL a migration waits at most 10s for a lock another
session holds on a table it changes, then rolls back and fails (allow
longer with ?lock_timeout=60s in the URL).
`

func runMigrate(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("migrate", migrateUsage)
	db := fs.String("db", "", "database: sqlite:PATH or postgres://... (env RETRYQ_DB; default "+defaultDB+")")
	if st, ok := parseFlags(env, fs, args); !ok {
		return st
	}
	if fs.NArg() > 0 {
		return usageError(env, "migrate", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	dsn := firstNonEmpty(*db, env.Getenv("RETRYQ_DB"), defaultDB)
	if err := checkDSN(dsn); err != nil {
		return usageError(env, "migrate", dsnSource(*db, env)+": "+err.Error())
	}
	// Opened as behind a transaction-mode pooler (no LISTEN, no named
	// prepared statements), which migrating needs neither of: so it also
	// works through PgBouncer, where the statements a node prepares at
	// start collide on the pooler's shared server connections.
	st, kind, err := openDB(ctx, dsn, dbOptions{migrate: false, pollOnly: true})
	if err != nil {
		fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
		return 1
	}
	defer st.Close()
	// The versions before and after the migrations this command applied:
	// read under the migration lock (PostgreSQL) or by the open (SQLite),
	// so a migration run by another process is not counted as this one's.
	var from, to int
	switch st := st.(type) {
	case *postgres.Store:
		from, to, err = st.Upgrade(ctx)
		if errors.Is(err, store.ErrSchemaTooNew) { // migrated by a newer binary since the open
			err = fmt.Errorf("%w: %s", err, tooNewHint)
		}
	case *sqlite.Store:
		from, to = st.OpenedVersion(), sqlite.KnownVersion()
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
		return 1
	}
	applied, known, err := st.SchemaVersion(ctx)
	if err != nil {
		fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
		return 1
	}
	if to > from {
		fmt.Fprintf(env.Stdout, "%s: applied %d migration(s), schema version %d -> %d\n", kind, to-from, from, to)
	}
	fmt.Fprintf(env.Stdout, "%s schema version %d (this binary knows %d): up to date\n", kind, applied, known)
	return exitOK
}
