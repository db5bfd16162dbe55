package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/store"
)

// TestOpenCloseCyclesLeakNothing opens, uses and closes a store many
// times, and fails to open refused files (a newer schema, another tool's
// history, a file that is not a database) as many: the process holds no
// more descriptors (the database file, its -wal) nor goroutines
// afterwards than after the first round.
func TestOpenCloseCyclesLeakNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "retryq.db")
	newer := filepath.Join(dir, "newer.db")
	s, err := Open(ctx, Config{Path: newer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, KnownVersion()+1); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	foreign := filepath.Join(dir, "foreign.db")
	db := rawDB(t, foreign)
	rawExec(t, db, `CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (1, 0)`)
	_ = db.Close()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("this is not a SQLite database, not even its header, but long enough to be read as one"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := map[string]error{newer: store.ErrSchemaTooNew, foreign: store.ErrForeignSchema, garbage: nil}
	round := func(i int) {
		t.Helper()
		s, err := Open(ctx, Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("leak%03d", i)
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: id, Type: "a"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetTask(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for p, want := range refused {
			s, err := Open(ctx, Config{Path: p})
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open(%s) succeeded", filepath.Base(p))
			}
			if want != nil && !errors.Is(err, want) {
				t.Fatalf("Open(%s) = %v, want %v", filepath.Base(p), err, want)
			}
		}
	}
	round(0)
	base := leakcheck.Take(t)
	for i := 1; i <= 30; i++ {
		round(i)
	}
	base.Settled(t, 5*time.Second, "30 rounds of opens and closes, and of refused opens")
}
