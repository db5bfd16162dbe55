package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
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

// openDB opens the store named by dsn: "sqlite:PATH", "postgres://…" or
// "postgresql://…". A bare path ending in .db is taken as SQLite.
func openDB(ctx context.Context, dsn string, o dbOptions) (store.Store, string, error) {
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
		return openDB(ctx, "sqlite:"+dsn, o)
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

// urlSchemeRE matches the scheme that starts a URL, however mistyped the
// rest ("postgres:/u:pw@h"); a string without one is read as keyword/value
// pairs, as the PostgreSQL driver does.
var urlSchemeRE = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*:`)

// urlParamRE matches a URL parameter: a name, then its value up to the
// next '&' or the fragment. The value may hold spaces: net/url keeps them.
var urlParamRE = regexp.MustCompile(`([^?&#/;=]*)=([^&#]*)`)

// redactDSN hides the passwords in a database name it echoes: the value of
// every parameter whose name holds "pass" (password, sslpassword, however
// cased or percent-encoded), read as the driver reads it (a URL's query
// parameter up to '&', a keyword/value pair's quoted or unquoted value
// with its escapes), and the user information before the last '@' of a
// URL, however mistyped its scheme (postgres:/u:pw@h). Each finds spans of
// the original text; every span is hidden whole, so that what cannot be
// told apart from a password is hidden with it.
func redactDSN(dsn string) string {
	var spans [][2]int
	if urlSchemeRE.MatchString(dsn) {
		for _, m := range urlParamRE.FindAllStringSubmatchIndex(dsn, -1) {
			key := dsn[m[2]:m[3]]
			if k, err := url.QueryUnescape(key); err == nil {
				key = k
			}
			if secretKey(key) {
				spans = append(spans, [2]int{m[4], m[5]})
			}
		}
	} else {
		spans = keywordSecrets(dsn)
	}
	if at := strings.LastIndex(dsn, "@"); at >= 0 {
		start := 0
		if i := strings.Index(dsn[:at], "://"); i >= 0 {
			start = i + 3
		}
		if i := strings.IndexByte(dsn[start:at], ':'); i >= 0 {
			spans = append(spans, [2]int{start + i + 1, at})
		}
	}
	if len(spans) == 0 {
		return dsn
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		lo, hi := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= hi; i++ {
			hi = max(hi, spans[i][1])
		}
		b.WriteString(dsn[pos:lo])
		b.WriteString("***")
		pos = hi
	}
	b.WriteString(dsn[pos:])
	return b.String()
}

// secretKey reports whether a connection parameter's name names a secret.
func secretKey(key string) bool {
	return strings.Contains(strings.ToLower(key), "pass")
}

// keywordSecrets returns the spans of the secret values of a keyword/value
// connection string ("host=h password='p w'"), read as libpq reads it:
// spaces may surround '=', a value is quoted with ' or runs to the next
// space, and a backslash escapes the next byte in either.
func keywordSecrets(s string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			break
		}
		key := strings.TrimRight(s[i:i+eq], " \t\n\r\v\f")
		if j := strings.LastIndexAny(key, " \t\n\r\v\f"); j >= 0 {
			key = key[j+1:]
		}
		v := i + eq + 1
		for v < len(s) && isConnSpace(s[v]) {
			v++
		}
		end, closed := v, false
		quoted := end < len(s) && s[end] == '\''
		if quoted {
			end++
		}
		for ; end < len(s); end++ {
			if s[end] == '\\' {
				end++
				continue
			}
			if quoted && s[end] == '\'' {
				end++
				closed = true
				break
			}
			if !quoted && isConnSpace(s[end]) {
				break
			}
		}
		end = min(end, len(s))
		if secretKey(key) {
			if closed { // keep the quotes: what follows stays a pair of its own
				spans = append(spans, [2]int{v + 1, end - 1})
			} else {
				spans = append(spans, [2]int{v, end})
			}
		}
		i = end
		if i == v { // an empty value: the next pair starts after it
			i++
		}
	}
	return spans
}

// isConnSpace reports whether c separates keyword/value pairs.
func isConnSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
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
