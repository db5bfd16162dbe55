package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// corruptDatabase writes a database of 200 tasks at path, closes it, and
// damages it: with header set, it overwrites the file's first 100 bytes
// (the SQLite header: the file is then no database, SQLITE_NOTADB); else
// the pages of its second half, where the tasks' rows are, leaving the
// schema readable (SQLITE_CORRUPT once a statement reads them).
func corruptDatabase(t testing.TB, path string, header bool) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	for i := range 200 {
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: fmt.Sprintf("t_%03d", i), Type: "t", MaxAttempts: 3, Payload: payload}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 1024))
	if header {
		_, err = f.WriteAt(junk[:100], 0)
	} else {
		for off := fi.Size() / 2 / 4096 * 4096; off < fi.Size() && err == nil; off += 4096 {
			_, err = f.WriteAt(junk, off)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// isCorruptNaming reports whether err is store.ErrCorrupt and
// store.ErrUnavailable and names path.
func isCorruptNaming(err error, path string) bool {
	return errors.Is(err, store.ErrCorrupt) && errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), path)
}

// TestCorruptDatabaseIsErrCorruptNamingTheFile: a statement that finds the
// database's pages damaged (SQLITE_CORRUPT) fails with store.ErrCorrupt
// and ErrUnavailable, naming the file, and from then on Ping fails with
// it: the node is not ready, though Ping's own reads do not touch the
// damaged pages. Before, the error was a bare "database disk image is
// malformed (11)", which the API answered 500 internal, and Ping said ready.
func TestCorruptDatabaseIsErrCorruptNamingTheFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	corruptDatabase(t, path, false)
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("Open of a database whose schema is intact: %v", err)
	}
	defer s.Close()
	_, err = s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
		Tasks: []store.NewTask{{ID: "new", Type: "t", MaxAttempts: 3, Payload: []byte(`{}`)}}})
	if !isCorruptNaming(err, path) {
		t.Errorf("insert into a corrupt database = %v; want ErrCorrupt and ErrUnavailable naming %s", err, path)
	}
	_, _, err = s.ListTasks(ctx, store.ListParams{Limit: 1000})
	if !isCorruptNaming(err, path) {
		t.Errorf("list of a corrupt database = %v; want ErrCorrupt and ErrUnavailable naming %s", err, path)
	}
	if err := s.Ping(ctx); !isCorruptNaming(err, path) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Ping after a corruption = %v; want ErrCorrupt and ErrUnavailable naming %s", err, path)
	}
}

// TestNotADatabaseIsErrCorruptAtOpen: a file whose header is not SQLite's
// (SQLITE_NOTADB) is refused by Open with store.ErrCorrupt, naming the
// file, rather than "migrate sqlite schema: file is not a database (26)".
func TestNotADatabaseIsErrCorruptAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	corruptDatabase(t, path, true)
	s, err := Open(t.Context(), Config{Path: path})
	if err == nil {
		s.Close()
		t.Fatal("Open of a file that is no database succeeded")
	}
	if !isCorruptNaming(err, path) || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Fatalf("Open of a file that is no database = %v; want ErrCorrupt naming %s, saying it is not a SQLite database", err, path)
	}
}
