package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "retryq.db")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Path"},
		{Config{Path: ":memory:"}, "Path"},
		{Config{Path: "file::memory:"}, "Path"},
		{Config{Path: "file:x.db"}, "Path"},
		{Config{Path: "x.db?mode=ro"}, "Path"},
		{Config{Path: "x.db", Synchronous: "SOMETIMES"}, "Synchronous"},
		{Config{Path: "x.db", BusyTimeout: -time.Second}, "BusyTimeout"},
		{Config{Path: "x.db", MaxReaders: -1}, "MaxReaders"},
		{Config{Path: "x.db", CacheSizeKiB: -1}, "CacheSizeKiB"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid naming %s", tc.cfg, err, tc.field)
		}
		if _, err := Open(context.Background(), tc.cfg); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ErrInvalid", tc.cfg, err)
		}
	}
	if err := (Config{Path: "x.db", Synchronous: "normal"}).Validate(); err != nil {
		t.Errorf("Validate(lower-case synchronous) = %v", err)
	}
	d := Config{Path: "x.db"}.withDefaults()
	if d.Synchronous != "FULL" || d.BusyTimeout != 5*time.Second || d.MaxReaders != 4 {
		t.Errorf("defaults = %+v", d)
	}
}

// openFile opens the store in the file at path, closed when the test ends.
func openFile(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRow("PRAGMA " + name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

func TestPragmas(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{{"", "2"}, {"NORMAL", "1"}, {"extra", "3"}} {
		s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "p.db"), Synchronous: tc.cfg, BusyTimeout: 1234 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if got := pragma(t, s.w, "journal_mode"); got != "wal" {
			t.Errorf("journal_mode = %s, want wal", got)
		}
		if got := pragma(t, s.w, "synchronous"); got != tc.want {
			t.Errorf("synchronous(%q) = %s, want %s", tc.cfg, got, tc.want)
		}
		if got := pragma(t, s.w, "busy_timeout"); got != "1234" {
			t.Errorf("writer busy_timeout = %s", got)
		}
		if got := pragma(t, s.r, "busy_timeout"); got != "1234" {
			t.Errorf("reader busy_timeout = %s", got)
		}
		if got := pragma(t, s.r, "query_only"); got != "1" {
			t.Errorf("reader query_only = %s", got)
		}
		if got := s.w.Stats().MaxOpenConnections; got != 1 {
			t.Errorf("writer MaxOpenConnections = %d", got)
		}
		s.Close()
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage("{ \"spaces\" :  [1, 2],\n\"k\":\"\u00e9\" }") // byte-for-byte, not normalized
	now := time.Date(2030, 1, 1, 0, 0, 0, 123456000, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "t_1", Type: "a", Payload: payload, IdempotencyKey: "k"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s, err = Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.GetTask(ctx, "t_1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != string(payload) {
		t.Errorf("payload = %q, want %q", got.Payload, payload)
	}
	if !got.CreatedAt.Equal(now) {
		t.Errorf("CreatedAt = %v, want %v (microsecond precision)", got.CreatedAt, now)
	}
	applied, known, err := s.SchemaVersion(ctx)
	if err != nil || applied != known || known != KnownVersion() {
		t.Errorf("SchemaVersion = %d, %d, %v", applied, known, err)
	}
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("schema_migrations rows = %d, %v; want %d", n, err, len(migrations))
	}
}

func TestSchemaTooNew(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "new.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, KnownVersion()+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(ctx, Config{Path: path})
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema = %v, want ErrSchemaTooNew", err)
	}
}

func TestMigrationsFromEmptyFile(t *testing.T) {
	// A database created by another tool (no schema_migrations) is migrated.
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "e.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE unrelated (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if applied, known, err := s.SchemaVersion(ctx); err != nil || applied != known {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, known, err)
	}
}

// lockedByAnother opens the database at path on a connection of its own,
// as another process would, and takes the write lock (BEGIN IMMEDIATE).
// ROLLBACK on the returned connection releases it; the test's end closes
// it.
func lockedByAnother(t *testing.T, path string) *sql.Conn {
	t.Helper()
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestBusyIsUnavailable(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := Open(ctx, Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := lockedByAnother(t, path)
	_, err = s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "t", Type: "a"}}})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("insert while locked = %v, want ErrUnavailable", err)
	}
	if !strings.HasPrefix(err.Error(), "insert tasks: ") {
		t.Errorf("error %q does not name the operation", err)
	}
	conn.ExecContext(ctx, "ROLLBACK")
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "t", Type: "a"}}}); err != nil {
		t.Fatalf("insert after unlock: %v", err)
	}
}

// TestQueryPlans checks that the hot queries are served by indexes: none
// scans the tasks table.
func TestQueryPlans(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	// No ANALYZE: retryq never runs it, so production plans are the
	// planner's defaults (and ANALYZE of near-empty tables would make it
	// prefer sorting to index order).
	const now = "1"
	// The summary's statement as DeadSummary builds it, with a filter.
	summaryWhere, summaryArgs := deadWhere(store.DeadFilter{Type: "a", Since: time.Unix(1, 0)})
	cases := map[string]struct {
		q    string
		args []any
		want string // index that must appear in the plan
	}{
		"fetch":                  {fetchQuery(0, true), []any{"p", 1, "w", 1, 1, 10, 100}, "tasks_fetch"},
		"fetch one type":         {fetchQuery(1, true), []any{"p", 1, "w", 1, 1, "a", 10, 100}, "tasks_fetch_type"},
		"fetch types":            {fetchQuery(3, true), []any{"p", 1, "w", 1, 1, "a", 10, "b", 10, "c", 10, 10, 100}, "tasks_fetch_type"},
		"fetch unbounded":        {fetchQuery(0, false), []any{"p", 1, "w", 1, 1, 10}, "tasks_fetch"},
		"fetch one type unbound": {fetchQuery(1, false), []any{"p", 1, "w", 1, 1, "a", 10}, "tasks_fetch_type"},
		"promote": {`UPDATE tasks SET state = 'pending', updated_at = ?1 WHERE rowid IN (SELECT rowid FROM tasks
			WHERE state IN ('scheduled', 'retry_waiting') AND run_at <= ?1 ORDER BY run_at, id LIMIT ?2)`, []any{1, 10}, "tasks_due"},
		"expired": {`SELECT ` + taskCols + ` FROM tasks WHERE state = 'running' AND lease_expires_at < ?
			ORDER BY lease_expires_at, id LIMIT ?`, []any{1, 10}, "tasks_lease"},
		"next wakeup run":   {`SELECT min(run_at) FROM tasks WHERE state IN ('scheduled', 'retry_waiting')`, nil, "tasks_due"},
		"next wakeup lease": {`SELECT min(lease_expires_at) FROM tasks WHERE state = 'running'`, nil, "tasks_lease"},
		"outcomes": {outcomeQuery(2), []any{"a", "l", "succeeded", nil, nil, 0, 0, nil, nil, nil, 0, "", 0, 0, "",
			"b", "l", "succeeded", nil, nil, 0, 0, nil, nil, nil, 0, "", 0, 0, "", 1}, "sqlite_autoindex_tasks_1"},
		"idempotency": {`SELECT id FROM tasks WHERE idempotency_key IN (?, ?)`, []any{"a", "b"}, "tasks_idempotency"},
		"retention": {`SELECT rowid FROM tasks WHERE state IN ('succeeded', 'cancelled', 'dead') AND state = ? AND updated_at < ?
			ORDER BY updated_at, id LIMIT ?`, []any{"succeeded", 1, 10}, "tasks_finished"},
		"list dead":      {`SELECT id FROM tasks WHERE state = 'dead' AND id < ? ORDER BY id DESC LIMIT ?`, []any{"z", 10}, "tasks_dead_id"},
		"dead summary":   {deadSummaryQuery(summaryWhere), append(summaryArgs, 10), "tasks_dead_group"},
		"attempts":       {`SELECT * FROM attempts WHERE task_id = ? ORDER BY id`, []any{"x"}, "attempts_task"},
		"stats attempts": {`SELECT task_type, count(*) FROM attempts WHERE finished_at >= ? GROUP BY task_type`, []any{now}, "attempts_finished"},
		"stats successes": {`SELECT type, total(attempt = 1), total(attempt > 1)
			FROM tasks WHERE state IN ('succeeded', 'cancelled', 'dead') AND state = 'succeeded' AND updated_at >= ?
			GROUP BY type`, []any{now}, "tasks_finished"},
	}
	for name, c := range cases {
		rows, err := s.w.Query(`EXPLAIN QUERY PLAN `+c.q, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		all := strings.Join(plan, "\n")
		for _, line := range plan {
			if (strings.HasPrefix(line, "SCAN tasks") || strings.HasPrefix(line, "SCAN attempts")) && !strings.Contains(line, "INDEX") {
				t.Errorf("%s: full table scan:\n%s", name, all)
			}
		}
		if strings.Contains(all, "TEMP B-TREE") && !strings.Contains(name, "types") && !strings.Contains(name, "stats") && name != "dead summary" {
			t.Errorf("%s: sorts instead of walking the index in order:\n%s", name, all)
		}
		if !strings.Contains(all, c.want) {
			t.Errorf("%s: plan does not use %s:\n%s", name, c.want, all)
		}
		if testing.Verbose() {
			t.Logf("%s:\n%s", name, all)
		}
	}
}

// TestCloseAnswersEveryWrite: writes racing with Close each return (done or
// ErrClosed); none is left waiting for a writer that has gone.
func TestCloseAnswersEveryWrite(t *testing.T) {
	for round := range 20 {
		s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "retryq.db")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		var done atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					id := fmt.Sprintf("r%d-g%d-%d", round, g, i)
					_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: id, Type: "t"}}})
					if errors.Is(err, store.ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("InsertTasks: %v", err)
						return
					}
					done.Add(1)
				}
			})
		}
		for done.Load() < int64(round) && ctx.Err() == nil { // vary how far the writers got
			runtime.Gosched()
		}
		s.Close()
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("round %d: writers still waiting 30 s after Close", round)
		}
		cancel()
	}
}

// TestMigrationFoldsSuccessfulAttempts: migration 2 moves the successful
// attempt of each succeeded task from the attempts table into the task row
// (its detail) and ListAttempts still returns the same history.
func TestMigrationFoldsSuccessfulAttempts(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "ok", Type: "t"}, {ID: "retrying", Type: "t"}}}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 2, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(leased) != 2 {
		t.Fatalf("FetchTasks: %v, %v", leased, err)
	}
	outs := make([]store.Outcome, 2)
	for i, l := range leased {
		outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateSucceeded, Detail: "200 OK"}
		if l.ID == "retrying" {
			outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateRetryWaiting, RunAt: now.Add(time.Hour),
				Error: &store.ErrorInfo{Code: "E", Message: "m", Class: "transient"}, LastDelay: time.Hour}
		}
	}
	if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now.Add(time.Second)}); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("RecordOutcomes: %v %v", err, errs)
	}
	want, err := s.ListAttempts(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	// Put the database back in the version-1 layout: the successful attempt
	// as an attempts row, the task row without its detail.
	if _, err := s.w.Exec(`INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at, outcome, delay, detail)
		SELECT id, type, attempt, worker_id, started_at, updated_at, 'succeeded', last_delay, success_detail FROM tasks WHERE id = 'ok'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`ALTER TABLE tasks DROP COLUMN success_detail`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(migrations[1].sql); err != nil {
		t.Fatalf("migration 2: %v", err)
	}
	got, err := s.ListAttempts(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		t.Fatalf("history after migration %+v, want %+v", got, want)
	}
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM attempts`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("attempts rows after migration = %d (%v), want 1 (the failure of task retrying)", n, err)
	}
}

func TestChunks(t *testing.T) {
	for _, tc := range []struct {
		n, cols int
		want    []int
	}{
		{0, 16, nil},
		{1, 16, []int{1}},
		{7, 15, []int{7}},
		{32, 12, []int{32}},
		{33, 12, []int{32, 1}},
		{1000, 16, []int{512, 256, 128, 64, 32, 8}},
		{1500, 40, []int{256, 256, 256, 256, 256, 128, 64, 16, 8, 4}},
	} {
		got := chunks(tc.n, tc.cols)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("chunks(%d, %d) = %v, want %v", tc.n, tc.cols, got, tc.want)
		}
		sum := 0
		for _, c := range got {
			sum += c
			if c*tc.cols > maxVars {
				t.Errorf("chunks(%d, %d): chunk of %d rows has more than %d parameters", tc.n, tc.cols, c, maxVars)
			}
		}
		if sum != tc.n {
			t.Errorf("chunks(%d, %d) sums to %d", tc.n, tc.cols, sum)
		}
	}
}

// TestBusyTimeoutNeverZero: a BusyTimeout under a millisecond waits a
// millisecond, and one beyond what SQLite's busy_timeout holds (an int32 of
// milliseconds, about 24 days) waits that long. Both used to reach SQLite
// as busy_timeout 0, which does not wait at all: with another process
// holding the lock, every write failed at once.
func TestBusyTimeoutNeverZero(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{500 * time.Microsecond, "1"}, {1500 * time.Microsecond, "2"}, {1000 * time.Hour, "2147483647"}, {1<<63 - 1, "2147483647"}} {
		s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "b.db"), BusyTimeout: tc.d})
		if err != nil {
			t.Fatal(err)
		}
		if got := pragma(t, s.w, "busy_timeout"); got != tc.want {
			t.Errorf("BusyTimeout %s: writer busy_timeout = %s, want %s", tc.d, got, tc.want)
		}
		if got := pragma(t, s.r, "busy_timeout"); got != tc.want {
			t.Errorf("BusyTimeout %s: reader busy_timeout = %s, want %s", tc.d, got, tc.want)
		}
		s.Close()
	}
}
