package cli

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
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
			return nil, "", err // "open postgres: ..." already
		}
		return st, "postgres", nil
	case strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://"):
		return openDB(ctx, "sqlite:"+dsn, o)
	default:
		return nil, "", fmt.Errorf("--db: unsupported database %q (want sqlite:PATH or postgres://USER@HOST/DB)", redactDSN(dsn))
	}
}

// passwordParamRE matches a password given as a parameter: a URL's query
// parameter or a keyword/value connection string's, quoted or not.
var passwordParamRE = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)`)

// redactDSN hides the passwords in a database name it echoes in an error:
// a password parameter, and the user information before the last '@' of a
// URL, however mistyped its scheme (postgres:/u:pw@h). What cannot be told
// apart from a password there is hidden with it.
func redactDSN(dsn string) string {
	dsn = passwordParamRE.ReplaceAllString(dsn, "${1}***")
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	start := 0
	if i := strings.Index(dsn[:at], "://"); i >= 0 {
		start = i + 3
	}
	if i := strings.IndexByte(dsn[start:at], ':'); i >= 0 {
		return dsn[:start+i] + ":***" + dsn[at:]
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
