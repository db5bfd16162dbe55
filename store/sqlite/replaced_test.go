package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestWritesRefusedOnceTheFileIsDeletedOrReplaced: when the database file
// or its WAL is deleted, renamed away or replaced (a backup moved over it)
// while the store has it open, SQLite goes on writing to the file it
// opened, which nobody finds at the path again. Before, Ping (and so
// /readyz) said ready and every insert answered success, and the tasks
// were gone at the next start. Now Ping and every write fail with
// ErrUnavailable and ErrFileReplaced.
func TestWritesRefusedOnceTheFileIsDeletedOrReplaced(t *testing.T) {
	cases := []struct {
		name  string
		touch func(t *testing.T, path string)
	}{
		{"database deleted", func(t *testing.T, path string) { remove(t, path) }},
		{"wal deleted", func(t *testing.T, path string) { remove(t, path+"-wal") }},
		{"database renamed away", func(t *testing.T, path string) {
			if err := os.Rename(path, path+".old"); err != nil {
				t.Fatal(err)
			}
		}},
		{"database replaced by a copy", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+".copy", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".copy", path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "q.db")
			s, err := Open(ctx, Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			insert := func(id string) error {
				_, err := s.InsertTasks(ctx, store.InsertParams{Now: now,
					Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3}}})
				return err
			}
			if err := insert("t_before"); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("Ping before: %v", err)
			}
			c.touch(t, path)
			err = s.Ping(ctx)
			if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrFileReplaced) {
				t.Fatalf("Ping: %v, want ErrUnavailable and ErrFileReplaced", err)
			}
			t.Logf("Ping: %v", err)
			err = insert("t_after")
			if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrFileReplaced) {
				t.Fatalf("InsertTasks: %v, want ErrUnavailable and ErrFileReplaced", err)
			}
			if _, err := s.GetTask(ctx, "t_after"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("GetTask of the refused task: %v, want ErrNotFound", err)
			}
		})
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
