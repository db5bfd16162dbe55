package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// TestPingNotReadyWhileTheDiskIsFull: while every write transaction fails
// with SQLITE_FULL, the store cannot take an enqueue or an outcome, so
// Ping (and /readyz) must fail with ErrUnavailable and ErrDiskFull; once a
// write succeeds again (space was freed), Ping passes again. Before, Ping
// only read and checked permissions, and said ready.
func TestPingNotReadyWhileTheDiskIsFull(t *testing.T) {
	dir := mountSmallTmpfs(t, 1<<20)
	ctx := t.Context()
	s := openFile(t, filepath.Join(dir, "q.db"))
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on an empty database: %v", err)
	}
	// Fill the file system with a plain file, leaving no room for the
	// database to grow.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for i := 0; i < 1024; i++ { // at most 4 MiB: the file system holds 1
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	payload := []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)
	insert := func(id string) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: payload}}})
		return err
	}
	var werr error
	for i := 0; i < 200 && werr == nil; i++ { // the WAL may still have room for a few
		werr = insert(fmt.Sprintf("t_%03d", i))
	}
	if werr == nil {
		t.Fatal("200 inserts of 8 KB succeeded on a full 1 MiB file system")
	}
	if !errors.Is(werr, store.ErrUnavailable) {
		t.Fatalf("insert on a full disk = %v, want ErrUnavailable", werr)
	}
	err = s.Ping(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Ping while writes fail with a full disk = %v, want ErrUnavailable and ErrDiskFull", err)
	}
	if !strings.Contains(err.Error(), "full") {
		t.Errorf("Ping error %q does not name the cause", err)
	}
	// Space freed: the next write succeeds and readiness comes back.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := insert("t_after"); err != nil {
		t.Fatalf("insert once space is freed: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write succeeded again: %v", err)
	}
}

// TestSchemaBrokenWhenATableIsDroppedOrRenamed: a table or column renamed
// or dropped under the store by another connection ("no such table") is
// ErrSchemaBroken and ErrUnavailable, and Ping fails with it. Before, the
// errors matched no sentinel (the API answered 500) and Ping said ready.
func TestSchemaBrokenWhenATableIsDroppedOrRenamed(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	storetest.CheckSchemaBroken(ctx, t, s, func(q string) error {
		_, err := other.ExecContext(ctx, q)
		return err
	})
}
