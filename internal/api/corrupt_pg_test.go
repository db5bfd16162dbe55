package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/store"
)

// pgCorruptStore answers ListTasks and Ping as store/postgres does once
// the server reports a damaged index (index_corrupted, SQLSTATE XX002).
type pgCorruptStore struct {
	store.Store
}

func (s *pgCorruptStore) err(op string) error {
	pe := &pgconn.PgError{Severity: "ERROR", Code: "XX002", Message: `index "tasks_pkey" contains unexpected zero page at block 3`}
	return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrCorrupt, pe)
}

func (s *pgCorruptStore) ListTasks(context.Context, store.ListParams) ([]store.Task, string, error) {
	return nil, "", s.err("list tasks")
}

func (s *pgCorruptStore) Ping(context.Context) error { return s.err("ping") }

// TestPostgresCorruptionAnswers503SayingTheServerReportsIt: PostgreSQL's
// data_corrupted or index_corrupted (store.ErrCorrupt, with no file of
// retryq's to name) is answered 503 with a message saying the database
// server reports corrupted data or an index and to look at its log, and
// /readyz says the same; neither speaks of a database file to restore and
// a server to restart, which is SQLite's remedy. The outage's log line
// says the database reports corruption.
func TestPostgresCorruptionAnswers503SayingTheServerReportsIt(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	e := newEnv(t, envOpts{
		log:  slog.New(slog.NewTextHandler(&logs, nil)),
		wrap: func(st store.Store) store.Store { return &pgCorruptStore{Store: st} },
	})
	for _, path := range []string{"/v1/tasks", "/readyz"} {
		code := CodeUnavailable
		if path == "/readyz" {
			code = CodeNotReady
		}
		r := e.mustErr(http.StatusServiceUnavailable, code, "", "GET", path, nil)
		msg := r.errMsg()
		if !strings.Contains(msg, "index") || !strings.Contains(msg, "database server's log") {
			t.Errorf("%s: message %q does not say the server reports a corrupted index, to see its log", path, msg)
		}
		if strings.Contains(msg, "file") {
			t.Errorf("%s: message %q speaks of a database file", path, msg)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "api: database reports corruption") {
		t.Errorf("the outage's log line does not say the database reports corruption:\n%s", out)
	}
	if errs := linesAt(out, "ERROR"); len(errs) != 0 {
		t.Errorf("a corrupt database logged as an internal error:\n%s", strings.Join(errs, "\n"))
	}
}
