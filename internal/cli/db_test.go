package cli

import (
	"strings"
	"testing"
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
