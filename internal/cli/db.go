package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/retryq/retryq/internal/connstr"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

// defaultDB is the database of server and migrate when --db and RETRYQ_DB are unset.
const defaultDB = "sqlite:retryq.db"

// dbOptions are the backend knobs shared by the commands that open a database.
type dbOptions struct {
	migrate  bool // apply migrations on open (PostgreSQL; SQLite always migrates)
	pollOnly bool // PostgreSQL: no LISTEN/NOTIFY (transaction-mode poolers)
	logger   *slog.Logger
}

// checkDSN refuses, before anything is opened, a database name openDB
// could not open whatever the database's state: an unknown scheme,
// "sqlite:" without a path, or white space around the name. The caller names the flag or variable.
func checkDSN(dsn string) error {
	switch {
	case strings.TrimSpace(dsn) != dsn:
		// An env file's trailing space would otherwise name another file:
		// a new, empty SQLite database served beside the real one.
		return errors.New("must not start or end with white space")
	case strings.HasPrefix(dsn, "sqlite:"):
		if strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//") == "" {
			return errors.New("sqlite: needs a file path, as in sqlite:retryq.db")
		}
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
	case strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://"):
	default:
		return fmt.Errorf("unsupported database %q (want sqlite:PATH or postgres://USER@HOST/DB)", redactDSN(dsn))
	}
	return nil
}

// dsnSource names where the database name came from: --db when given,
// else RETRYQ_DB when set, else the default (named --db too).
func dsnSource(flagValue string, env *Env) string {
	if flagValue == "" && env.Getenv("RETRYQ_DB") != "" {
		return "RETRYQ_DB"
	}
	return "--db"
}

// tooNewHint is what an operator does about a schema newer than the
// binary (store.ErrSchemaTooNew): no binary migrates a schema back.
const tooNewHint = "a newer retryq migrated this database: run that version or a later one (a schema is never migrated back)"

// openDB opens the store named by dsn: "sqlite:PATH", "postgres://…" or
// "postgresql://…". A bare path ending in .db is taken as SQLite. A
// schema newer than the binary's is refused with what to do about it.
func openDB(ctx context.Context, dsn string, o dbOptions) (store.Store, string, error) {
	st, kind, err := openStore(ctx, dsn, o)
	if errors.Is(err, store.ErrSchemaTooNew) {
		err = fmt.Errorf("%w: %s", err, tooNewHint)
	}
	return st, kind, err
}

// openStore is openDB without the hint.
func openStore(ctx context.Context, dsn string, o dbOptions) (store.Store, string, error) {
	if err := checkDSN(dsn); err != nil {
		return nil, "", fmt.Errorf("--db: %w", err)
	}
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		// SQLite says only "unable to open database file" of a directory,
		// which reads as a database that went away.
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return nil, "", fmt.Errorf("open sqlite %s: is a directory, not a database file (want sqlite:DIR/retryq.db)", path)
		}
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err != nil {
			if strings.HasPrefix(err.Error(), "open sqlite ") {
				return nil, "", err // named already, not "open sqlite X: open sqlite X: ..."
			}
			return nil, "", fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return st, "sqlite", nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		st, err := postgres.Open(ctx, postgres.Config{URL: dsn, AutoMigrate: o.migrate, PollOnly: o.pollOnly, Logger: o.logger})
		if err != nil {
			if !o.pollOnly && pooledStatementError(err) {
				return nil, "", fmt.Errorf("%w (is --db a transaction-mode pooler such as PgBouncer? run the server with --poll-only)", err)
			}
			return nil, "", err // "open postgres: ..." already
		}
		return st, "postgres", nil
	default: // a bare path ending in .db, as checkDSN found
		return openStore(ctx, "sqlite:"+dsn, o)
	}
}

// pooledStatementError reports whether err is PostgreSQL saying that a
// named prepared statement already exists (42P05) or does not (26000): the
// session is not the connection's own, as behind a transaction-mode pooler
// that hands one server connection to several clients.
func pooledStatementError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P05" || pe.Code == "26000")
}

// redactDSN hides the passwords in a database name it echoes
// (connstr.Redact).
func redactDSN(dsn string) string { return connstr.Redact(dsn) }

// firstNonEmpty returns the first non-empty string.
func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
