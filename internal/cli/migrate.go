package cli

import (
	"context"
	"fmt"

	"github.com/retryq/retryq/store/postgres"
)

func init() {
	register(&command{name: "migrate", summary: "apply database migrations and report the schema version", run: runMigrate})
}

const migrateUsage = `Usage: retryq migrate [--db DSN]

Applies the embedded schema migrations to the database, says how many it
applied, and prints the applied and known schema versions. SQLite
databases are migrated whenever they are opened; PostgreSQL databases are migrated here (or by the server
unless --no-migrate). A database newer than this binary is refused.
`

func runMigrate(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("migrate", migrateUsage)
	db := fs.String("db", "", "database: sqlite:PATH or postgres://... (env RETRYQ_DB; default "+defaultDB+")")
	if st, ok := parseFlags(env, fs, args); !ok {
		return st
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "retryq migrate: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	dsn := firstNonEmpty(*db, env.Getenv("RETRYQ_DB"), defaultDB)
	st, kind, err := openDB(ctx, dsn, dbOptions{migrate: false})
	if err != nil {
		fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
		return 1
	}
	defer st.Close()
	before := -1 // the version before migrating here (PostgreSQL only)
	if pg, ok := st.(*postgres.Store); ok {
		if before, _, err = pg.SchemaVersion(ctx); err == nil {
			err = pg.Migrate(ctx)
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
			return 1
		}
	}
	applied, known, err := st.SchemaVersion(ctx)
	if err != nil {
		fmt.Fprintf(env.Stderr, "retryq migrate: %v\n", err)
		return 1
	}
	if before >= 0 && applied > before {
		fmt.Fprintf(env.Stdout, "%s: applied %d migration(s), schema version %d -> %d\n", kind, applied-before, before, applied)
	}
	fmt.Fprintf(env.Stdout, "%s schema version %d (this binary knows %d): up to date\n", kind, applied, known)
	return exitOK
}
