package api

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store/sqlite"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// linesAt returns the log lines at level (as slog's text handler writes
// it: "level=WARN").
// checkOutageWarnedOnce checks that the log holds one warning or error for
// the outage from the API and one from /readyz, each naming it.
func checkOutageWarnedOnce(t *testing.T, out string) {
	t.Helper()
	warns := append(linesAt(out, "WARN"), linesAt(out, "ERROR")...)
	if len(warns) != 2 {
		t.Fatalf("%d warnings and errors for one outage, want 2 (the API's, /readyz's):\n%s", len(warns), out)
	}
	for _, w := range warns {
		if !strings.Contains(w, "database unavailable") && !strings.Contains(w, "not ready") {
			t.Errorf("warning does not name the outage: %s", w)
		}
	}
}

func linesAt(logs, level string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, " level="+level+" ") {
			out = append(out, l)
		}
	}
	return out
}

// TestOutageLoggedOncePerOutage: while the database is away (here a SQLite
// file whose write lock another process holds past the busy timeout), every
// request answered 503 and every /readyz probe used to log a line of its
// own (an Error per request, a Warn per probe), so a client retrying and a
// load balancer probing filled the log for as long as the outage lasted.
// Now the API warns once when requests start failing and /readyz once when
// the node becomes not ready, each with an Info line when it is over; the
// failures in between are at Debug. Meanwhile writes answer 503 with
// Retry-After and /readyz 503 not_ready; /healthz stays 200.
func TestOutageLoggedOncePerOutage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := newEnv(t, envOpts{store: st, log: slog.New(slog.NewTextHandler(&logs, nil))})
	e.enqueue(map[string]any{"type": "a"})
	e.must(http.StatusOK, "GET", "/readyz", nil)

	// Another process: it waits its turn for the lock (the node writes
	// too), then holds it.
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "POST", "/v1/tasks", map[string]any{"type": "a"})
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After: %s", r)
		}
		e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
		e.must(http.StatusOK, "GET", "/healthz", nil)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an enqueue to succeed", 10*time.Second, func() bool {
		return e.do("POST", "/v1/tasks", map[string]any{"type": "a"}).status == http.StatusCreated
	})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	e.must(http.StatusOK, "GET", "/readyz", nil)

	out := logs.String()
	checkOutageWarnedOnce(t, out)
	if infos := linesAt(out, "INFO"); len(infos) != 2 {
		t.Fatalf("%d Info lines after the outage, want 2 (the API's, /readyz's):\n%s", len(infos), out)
	}
}
