package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestDeadlineWhileWriterBusy: a write whose context deadline passes
// while it is still queued (the writer waits on BEGIN IMMEDIATE for a lock
// another process holds) returns the context's error at its deadline, and
// is not run later. It used to block for the whole busy_timeout and then
// get ErrUnavailable.
func TestDeadlineWhileWriterBusy(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	// The busy timeout is far longer than the bound on the answer (5 s),
	// which is far longer than the deadline, so that a loaded machine's
	// slow goroutines do not fail the test and a write that waits out the
	// busy timeout still does.
	s, err := Open(ctx, Config{Path: path, BusyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := lockedByAnother(t, path)
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.InsertTasks(dctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "t", Type: "a"}}})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Errorf("InsertTasks with a 50ms deadline returned after %v with %v; want context.DeadlineExceeded at the deadline", took, err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// The abandoned write never runs: a later write goes through alone.
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "u", Type: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTask(ctx, "t"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the write given up at its deadline ran anyway: GetTask = %v", err)
	}
}
