package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/store"
)

// fullStore fails every insert, and Ping, as a store whose disk is full
// does, while full is set.
type fullStore struct {
	store.Store
	full atomic.Bool
}

func (s *fullStore) err(op string) error {
	return fmt.Errorf("%s: %w: %w: disk I/O error (778)", op, store.ErrUnavailable, store.ErrDiskFull)
}

func (s *fullStore) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	if s.full.Load() {
		return nil, s.err("insert tasks")
	}
	return s.Store.InsertTasks(ctx, p)
}

func (s *fullStore) Ping(ctx context.Context) error {
	if s.full.Load() {
		return s.err("ping")
	}
	return s.Store.Ping(ctx)
}

// TestDiskFullAnswers503StorageFull: a write refused because the
// database's storage is full (store.ErrDiskFull, from either backend) is
// answered 503 with Retry-After, like any unavailability, but with the
// code storage_full and a message saying so, and /readyz says why it is
// not ready; the outage is logged once, naming it, and is over once a
// write succeeds. Before, the answer was the generic 503 unavailable
// ("the database is unavailable or the server is shutting down"), which
// sent operators looking for a database that was up.
func TestDiskFullAnswers503StorageFull(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var fs *fullStore
	e := newEnv(t, envOpts{
		log:  slog.New(slog.NewTextHandler(&logs, nil)),
		wrap: func(st store.Store) store.Store { fs = &fullStore{Store: st}; return fs },
	})
	e.enqueue(map[string]any{"type": "a"})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	fs.full.Store(true)
	for range 3 {
		r := e.mustErr(http.StatusServiceUnavailable, CodeStorageFull, "", "POST", "/v1/tasks", map[string]any{"type": "a"})
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After: %s", r)
		}
		if !strings.Contains(r.errMsg(), "storage is full") {
			t.Errorf("503 message %q does not say the storage is full", r.errMsg())
		}
		r = e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
		if !strings.Contains(r.errMsg(), "storage is full") {
			t.Errorf("/readyz message %q does not say the storage is full", r.errMsg())
		}
	}
	fs.full.Store(false)
	e.enqueue(map[string]any{"type": "a"})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	out := logs.String()
	warns := append(linesAt(out, "WARN"), linesAt(out, "ERROR")...)
	if len(warns) != 2 {
		t.Fatalf("%d warnings and errors for one full disk, want 2 (the API's, /readyz's):\n%s", len(warns), out)
	}
	for _, w := range warns {
		if !strings.Contains(w, "storage full") && !strings.Contains(w, "storage is full") {
			t.Errorf("warning does not name the full storage: %s", w)
		}
	}
	if infos := linesAt(out, "INFO"); len(infos) != 2 {
		t.Fatalf("%d Info lines after the disk was full, want 2 (the API's, /readyz's):\n%s", len(infos), out)
	}
}
