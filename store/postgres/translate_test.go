package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// setDatabase runs ALTER DATABASE ... SET name = value on the database of
// dbURL, as an operator would; it applies to sessions opened afterwards.
func setDatabase(t *testing.T, x *pgx.Conn, name, value string) {
	t.Helper()
	var db string
	if err := x.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	sql := "ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " SET " + name + " = '" + value + "'"
	if _, err := x.Exec(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
}

// TestOperatorTimeoutsAreUnavailable: timeouts an operator sets on the
// database (ALTER DATABASE ... SET) end a statement or a session with
// errors that mean "try again", and the store reports them as
// store.ErrUnavailable, so that callers back off and retry (the engine
// retries outcome commits only then; the API answers 503, not 500). They
// used to come back as bare PostgreSQL errors no caller could classify.
func TestOperatorTimeoutsAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, setting := range []string{"lock_timeout", "statement_timeout"} {
		t.Run(setting, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.URL(t)
			x := connect(t, dbURL)
			s := openURL(t, dbURL, nil)
			ctx := t.Context()
			tk := leased(t, s, "t", 1, time.Now())[0]
			// The pool's connections are replaced by ones that have the setting.
			setDatabase(t, x, setting, "100ms")
			s.Pool().Reset()
			// Another session holds the task's row: the store's statements
			// wait for it until the operator's timeout ends them.
			tx, err := x.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(ctx, "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", tk.ID); err != nil {
				t.Fatal(err)
			}
			_, err = s.CancelTask(ctx, store.CancelParams{ID: tk.ID, Now: time.Now()})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("CancelTask on a row held past %s: %v, want ErrUnavailable", setting, err)
			}
			_, err = s.RecordOutcomes(ctx, store.OutcomeParams{Now: time.Now(), Outcomes: []store.Outcome{
				{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateSucceeded}}})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("RecordOutcomes on a row held past %s: %v, want ErrUnavailable", setting, err)
			}
		})
	}
	t.Run("idle_session_timeout", func(t *testing.T) {
		t.Parallel()
		dbURL := pgtest.URL(t)
		x := connect(t, dbURL)
		s := openURL(t, dbURL, func(c *Config) { c.MaxConns = 1 })
		ctx := t.Context()
		// The pool's connection is replaced by one that has the setting. On
		// a loaded machine a new session may idle past the timeout before
		// its first query (it did at 50 ms): then the next one is tried.
		setDatabase(t, x, "idle_session_timeout", "250ms")
		s.Pool().Reset()
		var pid int
		for try := 1; ; try++ {
			err := s.Pool().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
			if err == nil {
				break
			}
			if try == 20 {
				t.Fatal(err)
			}
		}
		waitUntil(t, x, "the server to end the idle session",
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1", pid)
		// The pool checks connections idle for more than a second before
		// handing them out; this one idled for less, so the call finds out.
		_, err := s.GetTask(ctx, "none")
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("GetTask on a session the server ended: %v, want ErrUnavailable", err)
		}
		t.Logf("GetTask on a session the server ended: %v", err)
	})
}

// TestOpenRefusedByServer: a server that is reachable but refuses the
// connection makes Open fail at once, without panicking or retrying, with
// an error naming the cause: a database that does not exist is not
// ErrUnavailable (waiting will not create it), a connection limit reached
// is.
func TestOpenRefusedByServer(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	x := connect(t, dbURL)
	role := "retryq_nolimit_" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""))
	if _, err := x.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = x.Exec(context.Background(), "DROP ROLE "+role) })
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	noDB := *u
	noDB.Path = "/retryq_no_such_database"
	limited := *u
	limited.User = url.User(role)
	for _, c := range []struct {
		name, url, want string
		unavailable     bool
	}{
		{"missing database", noDB.String(), "does not exist", false},
		{"connection limit", limited.String(), "too many connections", true},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		start := time.Now()
		s, err := Open(ctx, Config{URL: c.url})
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open: %v, want an error saying %q", c.name, err, c.want)
		}
		if errors.Is(err, store.ErrUnavailable) != c.unavailable {
			t.Errorf("%s: Open: %v, ErrUnavailable: %v, want %v", c.name, err, !c.unavailable, c.unavailable)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: Open took %v", c.name, d)
		}
	}
}

// TestConnectTimeoutIsUnavailable: a server that accepts the TCP
// connection but never answers (a frozen host, a full backlog behind a
// proxy) makes the connection attempt run out its ConnectTimeout. That is
// the database being unavailable, like a refused connection, not the
// caller's deadline: callers that back off on ErrUnavailable must see it.
// It used to be a bare context.DeadlineExceeded.
func TestConnectTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: "postgres://retryq@" + ln.Addr().String() + "/retryq?sslmode=disable", ConnectTimeout: 200 * time.Millisecond})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open of a server that never answers succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("Open outlasted the caller's deadline: %v", err)
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open of a server that never answers: %v, want ErrUnavailable", err)
	}
}

// TestInsufficientResourcesTranslation: PostgreSQL's class 53
// (insufficient resources) is ErrUnavailable, and disk_full (53100) also
// ErrDiskFull, so that the API answers 503 storage_full and callers can
// tell a full disk from a database that is down. A real 53100 needs a
// file system that fills up under the server, which only root can set up
// (TestDiskFullOnATablespace); a real 53300 is in TestOpenRefusedByServer.
func TestInsufficientResourcesTranslation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code string
		full bool
	}{
		{"53000", false}, // insufficient_resources
		{"53100", true},  // disk_full
		{"53200", false}, // out_of_memory
		{"53300", false}, // too_many_connections
		{"53400", false}, // configuration_limit_exceeded
	} {
		pe := &pgconn.PgError{Severity: "ERROR", Code: c.code, Message: "could not extend file: No space left on device"}
		err := translate("insert tasks", fmt.Errorf("insert: %w", pe))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", c.code, err)
		}
		if errors.Is(err, store.ErrDiskFull) != c.full {
			t.Errorf("%s: %v, ErrDiskFull %v, want %v", c.code, err, !c.full, c.full)
		}
		var got *pgconn.PgError
		if !errors.As(err, &got) || got.Code != c.code {
			t.Errorf("%s: %v does not carry the server's error", c.code, err)
		}
		// Translated again at an outer boundary, it keeps its sentinels.
		if again := translate("enqueue", err); errors.Is(again, store.ErrDiskFull) != c.full {
			t.Errorf("%s translated twice: %v", c.code, again)
		}
	}
}

// TestCorruptionTranslation: PostgreSQL's data_corrupted (XX001) and
// index_corrupted (XX002) are store.ErrCorrupt with ErrUnavailable, as
// SQLite's SQLITE_CORRUPT is, so that the API answers 503 saying the
// database reports damage instead of 500 internal. Other internal errors
// (XX000) stay unclassified. A real XX002 needs an index damaged on disk
// and amcheck, which a throwaway cluster may not have.
func TestCorruptionTranslation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code    string
		corrupt bool
	}{
		{"XX000", false}, // internal_error
		{"XX001", true},  // data_corrupted
		{"XX002", true},  // index_corrupted
	} {
		pe := &pgconn.PgError{Severity: "ERROR", Code: c.code, Message: `index "tasks_pkey" contains unexpected zero page at block 3`}
		err := translate("list tasks", fmt.Errorf("query: %w", pe))
		if errors.Is(err, store.ErrCorrupt) != c.corrupt || errors.Is(err, store.ErrUnavailable) != c.corrupt {
			t.Errorf("%s: %v, want ErrCorrupt and ErrUnavailable %v", c.code, err, c.corrupt)
		}
		var got *pgconn.PgError
		if !errors.As(err, &got) || got.Code != c.code {
			t.Errorf("%s: %v does not carry the server's error", c.code, err)
		}
		if again := translate("dead letters", err); errors.Is(again, store.ErrCorrupt) != c.corrupt {
			t.Errorf("%s translated twice: %v", c.code, again)
		}
	}
}

// TestOpenNilContext: Open refuses a nil context with ErrInvalid naming
// ctx, as every store method does, before it parses or dials anything.
func TestOpenNilContext(t *testing.T) {
	//lint:ignore SA1012 the nil context is what is tested
	s, err := Open(nil, Config{URL: "postgres://127.0.0.1:1/none"}) //nolint:staticcheck
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "ctx") {
		t.Fatalf("Open(nil) = %v, want ErrInvalid naming ctx", err)
	}
}
