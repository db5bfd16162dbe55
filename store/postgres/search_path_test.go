package postgres

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// withSearchPath returns dbURL with the search_path run-time parameter set.
func withSearchPath(t *testing.T, dbURL, path string) string {
	t.Helper()
	return withParam(t, dbURL, "search_path", path)
}

// withParam returns dbURL with the parameter name set to value. Spaces are
// written %20: pgx reads a '+' in a query as itself.
func withParam(t *testing.T, dbURL, name, value string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // Encode writes a '+' as %2B
	return u.String()
}

// TestSchemasInOneDatabaseStayApart: stores whose URLs name different
// schemas (search_path) in one database each migrate and use their own
// tables, none in public, and one's tasks and version are not the other's.
func TestSchemasInOneDatabaseStayApart(t *testing.T) {
	dbURL := pgtest.URL(t)
	ctx := t.Context()
	admin := openURL(t, dbURL, func(c *Config) { c.AutoMigrate = false })
	if _, err := admin.pool.Exec(ctx, "CREATE SCHEMA tenant_a; CREATE SCHEMA tenant_b"); err != nil {
		t.Fatal(err)
	}
	a := openURL(t, withSearchPath(t, dbURL, "tenant_a"), nil)
	b := openURL(t, withSearchPath(t, dbURL, "tenant_b"), nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := a.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("a", 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.ListTasks(ctx, store.ListParams{Limit: 10}); err != nil || len(got) != 0 {
		t.Errorf("tenant_b lists %d tasks (%v), want none of tenant_a's", len(got), err)
	}
	if got, _, err := a.ListTasks(ctx, store.ListParams{Limit: 10}); err != nil || len(got) != 2 {
		t.Errorf("tenant_a lists %d tasks (%v), want 2", len(got), err)
	}
	for name, s := range map[string]*Store{"tenant_a": a, "tenant_b": b} {
		if applied, known, err := s.SchemaVersion(ctx); err != nil || applied != known {
			t.Errorf("%s: SchemaVersion = %d, %d, %v", name, applied, known, err)
		}
	}
	if applied, _, err := admin.SchemaVersion(ctx); err != nil || applied != 0 {
		t.Errorf("public: SchemaVersion = %d, %v; want 0 (nothing created there)", applied, err)
	}
	var n int
	if err := admin.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil || n != 0 {
		t.Errorf("public holds %d tables (%v), want 0", n, err)
	}
}

// TestMigrateNamesAMissingSearchPathSchema: a URL whose search_path names
// no existing schema is refused with an error saying so, not PostgreSQL's
// "no schema has been selected to create in" alone.
func TestMigrateNamesAMissingSearchPathSchema(t *testing.T) {
	u := withSearchPath(t, pgtest.URL(t), "not_created")
	s, err := Open(t.Context(), Config{URL: u, AutoMigrate: true})
	if err == nil {
		s.Close()
		t.Fatal("Open with a search_path naming a missing schema migrated")
	}
	if !strings.Contains(err.Error(), "search_path") || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open: %v, want an error naming search_path", err)
	}
}
