package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/retryq/retryq/store"
)

// TestUnparsableURLErrorHidesThePassword: a connection string the driver
// cannot parse is quoted in Validate's and Open's errors, which end in the
// server's log and the CLI's output, with its passwords hidden whatever
// their spelling. The driver masks only the forms it recognises, so a
// keyword/value "password = ..." (spaces around '='), an escaped space in
// the value, a differently cased keyword or a password holding '@' showed
// all or part of it.
func TestUnparsableURLErrorHidesThePassword(t *testing.T) {
	t.Setenv("PGPASSFILE", "/nonexistent/retryq-test-pgpass")
	t.Setenv("PGSERVICEFILE", "/nonexistent/retryq-test-pgservice")
	for _, dsn := range []string{
		"host=127.0.0.1 password = s3cret-XYZ sslmode=bogus",
		`host=127.0.0.1 password=s3cret\ XYZ sslmode=bogus`,
		"host=127.0.0.1 PASSWORD=s3cret-XYZ sslmode=bogus",
		"host=127.0.0.1 password=s3cret-XYZ port=x",
		"postgresql://u:s3cret@XYZ@127.0.0.1:1/db?sslmode=bogus",
		"postgres://u@127.0.0.1:1/db?Password=s3cret-XYZ&sslmode=bogus",
		"postgres://u:s3cret-XYZ@127.0.0.1:99x/db",
	} {
		verr := Config{URL: dsn}.Validate()
		_, oerr := Open(context.Background(), Config{URL: dsn})
		for name, err := range map[string]error{"Validate": verr, "Open": oerr} {
			if !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s(%q) = %v, want an error matching store.ErrInvalid", name, dsn, err)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "XYZ") {
				t.Errorf("%s(%q): the error shows the password: %s", name, dsn, msg)
			}
		}
	}
}
