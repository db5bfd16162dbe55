package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestPingNotReadyWhileAnotherHoldsTheWriteLock: while another process
// holds the database's write lock past the busy timeout, every write
// transaction fails with ErrUnavailable, so Ping (and /readyz) must fail
// too; once a write commits again, Ping passes. Before, Ping only read,
// and said ready while every enqueue was answered 503.
func TestPingNotReadyWhileAnotherHoldsTheWriteLock(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := Open(ctx, Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insert := func(id string) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: id, Type: "a"}}})
		return err
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping before the lock: %v", err)
	}
	conn := lockedByAnother(t, path)
	if err := insert("t1"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("insert while locked = %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping while writes wait out the busy timeout = %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Reads alone do not say writes work again.
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping passed before any write committed")
	}
	if err := insert("t2"); err != nil {
		t.Fatalf("insert after the lock: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write committed: %v", err)
	}
}
