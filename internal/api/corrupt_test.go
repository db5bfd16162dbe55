package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// corruptSQLite writes a SQLite database of tasks at path, closes it, and
// overwrites the pages of its second half, where the tasks' rows are: the
// schema stays readable, so the store opens, and statements that read
// the tasks fail with SQLITE_CORRUPT.
func corruptSQLite(t *testing.T, path string) {
	t.Helper()
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	for i := range 200 {
		if _, err := s.InsertTasks(t.Context(), store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: fmt.Sprintf("t_%03d", i), Type: "a", MaxAttempts: 3, Payload: payload}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
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
	for off := fi.Size() / 2 / 4096 * 4096; off < fi.Size(); off += 4096 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptDatabaseAnswers503NamingTheCause: a SQLite database whose
// pages are damaged (SQLITE_CORRUPT) is answered 503 with a message saying
// the database file is corrupt, /readyz is not ready saying so, and the
// server log names the file; the server keeps answering. Before, every
// request that read a damaged page was a 500 internal and /readyz said
// ready.
func TestCorruptDatabaseAnswers503NamingTheCause(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "retryq.db")
	corruptSQLite(t, path)
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("open a database whose schema is intact: %v", err)
	}
	var logs syncBuffer
	e := newEnv(t, envOpts{store: st, log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 2 {
		r := e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "GET", "/v1/tasks?limit=500", nil)
		if !strings.Contains(r.errMsg(), "corrupt") {
			t.Errorf("503 message %q does not say the database is corrupt", r.errMsg())
		}
		r = e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
		if !strings.Contains(r.errMsg(), "corrupt") {
			t.Errorf("/readyz message %q does not say the database is corrupt", r.errMsg())
		}
	}
	e.must(http.StatusOK, "GET", "/healthz", nil)
	out := logs.String()
	if !strings.Contains(out, path) || !strings.Contains(out, "api: database file corrupt") {
		t.Errorf("the log does not name the corrupt file %s:\n%s", path, out)
	}
	if errs := linesAt(out, "ERROR"); len(errs) != 0 {
		t.Errorf("a corrupt database logged as an internal error:\n%s", strings.Join(errs, "\n"))
	}
}
