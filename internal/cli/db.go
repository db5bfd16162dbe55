package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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

// openDB opens the store named by dsn: "sqlite:PATH", "postgres://…" or
// "postgresql://…". A bare path ending in .db is taken as SQLite.
func openDB(ctx context.Context, dsn string, o dbOptions) (store.Store, string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return nil, "", fmt.Errorf("--db: sqlite: needs a file path, as in sqlite:retryq.db")
		}
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err != nil {
			return nil, "", fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return st, "sqlite", nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		st, err := postgres.Open(ctx, postgres.Config{URL: dsn, AutoMigrate: o.migrate, PollOnly: o.pollOnly, Logger: o.logger})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres: %w", err)
		}
		return st, "postgres", nil
	case strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://"):
		return openDB(ctx, "sqlite:"+dsn, o)
	default:
		return nil, "", fmt.Errorf("--db: unsupported database %q (want sqlite:PATH or postgres://USER@HOST/DB)", redactDSN(dsn))
	}
}

// redactDSN hides a password in a connection URL.
func redactDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	scheme := strings.Index(dsn, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return dsn
	}
	userinfo := dsn[scheme+3 : at]
	if i := strings.IndexByte(userinfo, ':'); i >= 0 {
		return dsn[:scheme+3] + userinfo[:i] + ":***" + dsn[at:]
	}
	return dsn
}

// firstNonEmpty returns the first non-empty string.
func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
