// Package backendtest opens fresh stores of either storage backend for the
// tests that run above the store (engine, HTTP API, end-to-end), so that
// each such test can run once per backend:
//
//	func TestX(t *testing.T) { backendtest.Run(t, testX) }
//
//	func testX(t *testing.T, backend string) {
//		st := backendtest.Open(t, backend, "")
//		defer st.Close()
//		...
//	}
//
// The PostgreSQL backend uses internal/pgtest: a throwaway cluster, or
// RETRYQ_TEST_POSTGRES_URL; without either its subtests skip (and fail in
// CI). Packages that use it should stop the throwaway cluster with
// pgtest.Main from their TestMain.
package backendtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

// The backend names, which are also the names of the subtests Run starts.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Names lists the backends, in the order Run runs them.
var Names = []string{SQLite, Postgres}

// Run runs test once per backend, as parallel subtests named after it.
func Run(t *testing.T, test func(t *testing.T, backend string)) {
	t.Helper()
	for _, b := range Names {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// RunSerial is Run with the backends one after the other, for tests that
// measure the whole process (its goroutines, say), which a parallel
// subtest would disturb.
func RunSerial(t *testing.T, test func(t *testing.T, backend string)) {
	t.Helper()
	for _, b := range Names {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// Database makes a new, empty database of the backend and returns a
// function that opens a store on it; called again, it reopens the same
// database, as a restarted process would. sqliteSync is SQLite's
// synchronous setting ("" = the backend's default). The caller closes the
// stores it opens; a PostgreSQL database is dropped when t ends (after the
// cleanups registered later, so close stores with t.Cleanup or before t
// ends).
func Database(t testing.TB, backend, sqliteSync string) func() store.Store {
	t.Helper()
	var open func() (store.Store, error)
	switch backend {
	case SQLite:
		cfg := sqlite.Config{Path: filepath.Join(t.TempDir(), "retryq.db"), Synchronous: sqliteSync}
		open = func() (store.Store, error) { return sqlite.Open(context.Background(), cfg) }
	case Postgres:
		cfg := postgres.Config{URL: pgtest.URL(t), AutoMigrate: true, MaxConns: 6}
		open = func() (store.Store, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return postgres.Open(ctx, cfg)
		}
	default:
		t.Fatalf("backendtest: unknown backend %q (want %q or %q)", backend, SQLite, Postgres)
	}
	return func() store.Store {
		t.Helper()
		st, err := open()
		if err != nil {
			t.Fatalf("open %s store: %v", backend, err)
		}
		return st
	}
}

// Open opens a store on a new, empty database of the backend (see
// Database).
func Open(t testing.TB, backend, sqliteSync string) store.Store {
	t.Helper()
	return Database(t, backend, sqliteSync)()
}
