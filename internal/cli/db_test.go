package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedactDSNHidesPasswords: a --db value the server cannot use is
// echoed in its error without the password, whatever form the password
// takes: URL user info, a password query parameter, a keyword/value
// string, or a URL mistyped with one slash. Only the first form used to
// be hidden, so a typo put the database password in the server's log.
func TestRedactDSNHidesPasswords(t *testing.T) {
	for _, dsn := range []string{
		"mysql://u:secretpw@h/x",
		"mysql://u@h/x?password=secretpw",
		"mysql://u@h/x?sslmode=off&PASSWORD=secretpw&x=1",
		"postgres:/u:secretpw@h/x",
		"postgres:u:secretpw@h/x",
		"Postgres://u:secretpw@h/x",
		"postgres//u:secretpw@h/x",
		"host=h user=u password=secretpw dbname=x",
		"host=h user=u password = 'secret pw' dbname=x",
		"mysql://u:secret@pw@h/x",
	} {
		got := redactDSN(dsn)
		if strings.Contains(got, "secret") {
			t.Errorf("redactDSN(%q) = %q: shows the password", dsn, got)
		}
		status, _, stderr := runMain("migrate", "--db", dsn)
		if status == exitOK || strings.Contains(stderr, "secret") {
			t.Errorf("retryq migrate --db %q: status %d, stderr shows the password:\n%s", dsn, status, stderr)
		}
	}
	// What is not a secret stays, so the operator sees what was wrong.
	for dsn, want := range map[string]string{
		"mysql://u:pw@h/x":         "mysql://u:***@h/x",
		"mysql://u@h/x?password=p": "mysql://u@h/x?password=***",
		"/var/lib/retryq/q.sqlite": "/var/lib/retryq/q.sqlite",
		"mysql://u@h/x":            "mysql://u@h/x",
	} {
		if got := redactDSN(dsn); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// TestRedactDSNHidesWholePasswords: a password is hidden whole, however
// the connection string spells it: a keyword/value value holding '&' or
// an escaped space, an sslpassword (the client key's passphrase), a
// percent-encoded parameter name, a URL parameter value holding a space.
// These used to show part or all of the secret.
func TestRedactDSNHidesWholePasswords(t *testing.T) {
	for _, dsn := range []string{
		"host=h password=ab&secretpw dbname=x",
		`host=h password=ab\ secretpw dbname=x`,
		"host=h sslpassword=secretpw sslkey=k.pem",
		"postgres://u@h/x?sslpassword=secretpw",
		"postgres://u@h/x?pass%77ord=secretpw",
		"postgres://u@h/x?password=ab secretpw&x=1",
		"host=h PGPASSWORD = 'ab secretpw'",
	} {
		if got := redactDSN(dsn); strings.Contains(got, "secret") {
			t.Errorf("redactDSN(%q) = %q: shows the password", dsn, got)
		}
	}
	// What is not a secret stays.
	for dsn, want := range map[string]string{
		"postgres://u@h/x?password=p&sslmode=disable": "postgres://u@h/x?password=***&sslmode=disable",
		"host=h password=p&q dbname=x":                "host=h password=*** dbname=x",
		"host=h password='p q' dbname=x":              "host=h password='***' dbname=x",
	} {
		if got := redactDSN(dsn); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// FuzzRedactDSN checks redactDSN against the PostgreSQL driver's own
// reading of a connection string: whatever password the driver would
// take from a string, the redacted string does not show it, and read
// again it holds no password but the mask.
func FuzzRedactDSN(f *testing.F) {
	// Keep the driver off the environment and the files it may read.
	f.Setenv("PGPASSWORD", "")
	f.Setenv("PGPASSFILE", "/nonexistent/retryq-fuzz-pgpass")
	f.Setenv("PGSERVICE", "")
	f.Setenv("PGSERVICEFILE", "/nonexistent/retryq-fuzz-pgservice")
	for _, s := range []string{
		"postgres://u:pw@h/x", "postgres://u:p%40w@h:5432/x?sslmode=disable", "postgresql://u@h/x?password=pw&x=1",
		"postgres://u@h/x?PASSWORD=pw", "postgres://u@h/x?pass%77ord=pw", "postgres://u:a@b@h/x",
		"host=h user=u password=pw dbname=x", "password = 'p\\'w x' host=h", `password=a\ b`, "password=a&b host=h",
		"mysql://u:pw@h/x", "postgres:/u:pw@h/x", "sqlite:q.db", "host=h password=", "user=u:x@y password=z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		got := redactDSN(dsn)
		lower := strings.ToLower(dsn)
		for _, risky := range []string{"ssl", "file", "service", "/dev", "target_session_attrs"} {
			if strings.Contains(lower, risky) {
				return // the driver would read files or dial to check
			}
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil || cfg.Password == "" {
			return
		}
		if len(cfg.Password) >= 4 && strings.Contains(got, cfg.Password) {
			t.Fatalf("redactDSN(%q) = %q: shows the password %q", dsn, got, cfg.Password)
		}
		if again, err := pgconn.ParseConfig(got); err == nil && again.Password != "" && again.Password != "***" {
			t.Fatalf("redactDSN(%q) = %q, which still holds the password %q (was %q)", dsn, got, again.Password, cfg.Password)
		}
	})
}

// TestUnsupportedDBIsUsageError: a --db (or RETRYQ_DB) that names no
// database retryq can open is a bad flag: `retryq migrate` and `retryq
// server` exit with the usage status 2, naming the flag, and the server
// does so before it takes its --listen address.
func TestUnsupportedDBIsUsageError(t *testing.T) {
	clearServerEnv(t)
	for _, dsn := range []string{"mysql://a:b@h/x", "sqlite:", "retryq"} {
		status, _, stderr := runMain("migrate", "--db", dsn)
		if status != exitUsage || !strings.Contains(stderr, "--db") {
			t.Errorf("migrate --db %q: status %d, stderr %q; want %d naming --db", dsn, status, stderr, exitUsage)
		}
		status, stderr = runServerToExit(t, "server", "--db", dsn, "--listen", "127.0.0.1:0")
		if status != exitUsage || !strings.Contains(stderr, "--db") || strings.Contains(stderr, "server failed to start") {
			t.Errorf("server --db %q: status %d, stderr %q; want %d naming --db", dsn, status, stderr, exitUsage)
		}
	}
	t.Setenv("RETRYQ_DB", "mysql://h/x")
	if status, _, stderr := runMain("migrate"); status != exitUsage || !strings.Contains(stderr, "RETRYQ_DB") {
		t.Errorf("migrate with RETRYQ_DB=mysql://h/x: status %d, stderr %q; want %d naming RETRYQ_DB", status, stderr, exitUsage)
	}
}

// TestSQLiteDirectoryNamedAsSuch: a --db naming a directory is refused at
// start, by `retryq server` and `retryq migrate` alike, with an error that
// says the path is a directory. SQLite only said "migrate sqlite schema:
// database unavailable: unable to open database file (14)", which reads
// as a database that went away.
func TestSQLiteDirectoryNamedAsSuch(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	for _, dsn := range []string{"sqlite:" + dir, dir + "/sub.db"} {
		if strings.HasSuffix(dsn, ".db") {
			if err := os.Mkdir(dsn, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		status, _, stderr := runMain("migrate", "--db", dsn)
		if status != 1 || !strings.Contains(stderr, "is a directory") {
			t.Errorf("migrate --db %q: status %d, stderr %q; want 1 saying it is a directory", dsn, status, stderr)
		}
		status, log := runServerBriefly(t, "--db", dsn, "--listen", "127.0.0.1:0")
		if status != 1 || !strings.Contains(log, "is a directory") {
			t.Errorf("server --db %q: status %d; want 1 saying it is a directory; log:\n%s", dsn, status, log)
		}
	}
}
