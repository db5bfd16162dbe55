package sqlite

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestWALShrinksAfterLongRead: while another connection holds a long read
// (an operator's sqlite3 session, a backup with VACUUM INTO as
// docs/operations.md advises), checkpoints cannot pass it and the WAL file
// grows with every write. Once the read ends, the WAL is reset and cut back
// to walSizeLimit. It used to keep its peak size on disk for as long as the
// store stayed open.
func TestWALShrinksAfterLongRead(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "wal.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "first", Type: "a"}}}); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	reader, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM tasks`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the long read sees %d tasks (%v), want 1", n, err)
	}
	walSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	payload := []byte(`{"blob":"` + string(bytes.Repeat([]byte("x"), 64<<10)) + `"}`)
	for b := 0; walSize() <= walSizeLimit+walSizeLimit/2; b++ {
		if b == 100 {
			t.Fatalf("the WAL is only %d bytes after %d batches", walSize(), b)
		}
		var ts []store.NewTask
		for i := range 100 {
			ts = append(ts, store.NewTask{ID: fmt.Sprintf("big-%d-%d", b, i), Type: "a", Payload: payload})
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: ts}); err != nil {
			t.Fatal(err)
		}
	}
	grown := walSize()
	if _, err := reader.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// The next commits checkpoint the whole WAL, and the write after that
	// starts it again from the beginning.
	for i := 0; walSize() > walSizeLimit; i++ {
		if i == 20 {
			t.Fatalf("the WAL grew to %d bytes during the long read and is still %d bytes after %d writes since (limit %d)", grown, walSize(), i, walSizeLimit)
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: fmt.Sprintf("small-%d", i), Type: "a"}}}); err != nil {
			t.Fatal(err)
		}
	}
}
