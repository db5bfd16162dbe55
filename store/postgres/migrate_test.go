package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// TestMigrate applies the migrations explicitly and checks the schema version.
func TestMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	s := openURL(t, url, func(c *Config) { c.AutoMigrate = false })
	applied, known, err := s.SchemaVersion(ctx)
	if err != nil || applied != 0 || known != KnownVersion() {
		t.Fatalf("SchemaVersion on empty db = %d, %d, %v", applied, known, err)
	}
	// Concurrent migrations from several nodes are safe.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s := openURL(t, url, func(c *Config) { c.AutoMigrate = false })
			errs[i] = s.Migrate(ctx)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	applied, known, err = s.SchemaVersion(ctx)
	if err != nil || applied != known {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, known, err)
	}
	// A newer schema is refused by Open and Migrate.
	if _, err := s.Pool().Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Migrate on newer schema: %v", err)
	}
	for _, auto := range []bool{false, true} {
		s2, err := Open(ctx, Config{URL: url, AutoMigrate: auto})
		if !errors.Is(err, store.ErrSchemaTooNew) {
			t.Fatalf("Open(AutoMigrate=%v) on newer schema: %v", auto, err)
		}
		if s2 != nil {
			s2.Close()
		}
	}
}

// TestMigrationFoldsSuccessfulAttempts: migration 3 moves the successful
// attempt of each succeeded task from the attempts table into the task row
// (its detail) and ListAttempts still returns the same history.
func TestMigrationFoldsSuccessfulAttempts(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("m", 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(leased) != 1 {
		t.Fatalf("FetchTasks: %v, %v", leased, err)
	}
	out := store.Outcome{TaskID: leased[0].ID, LeaseID: leased[0].LeaseID, State: store.StateSucceeded, Detail: "200 OK"}
	if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{out}, Now: now.Add(time.Second)}); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("RecordOutcomes: %v %v", err, errs)
	}
	want, err := s.ListAttempts(ctx, leased[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	// Back to the version-2 layout: the success as an attempts row, no
	// success_detail column.
	for _, q := range []string{
		`INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at, outcome, delay_ns, detail)
		SELECT id, type, attempt, worker_id, started_at, updated_at, 'succeeded', last_delay_ns, success_detail FROM tasks`,
		`ALTER TABLE tasks DROP COLUMN success_detail`,
		migrations[2].sql,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := s.ListAttempts(ctx, leased[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		t.Fatalf("history after migration %+v, want %+v", got, want)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM attempts`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("attempts rows after migration = %d (%v), want 0", n, err)
	}
}

// TestMigrationLightensHistoryIndexes: migration 4 drops the attempts
// primary-key index and replaces the finished_at btree with a BRIN index,
// keeping every history row, and the statistics window still counts them
// (through the BRIN index when scans are forced onto an index).
func TestMigrationLightensHistoryIndexes(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("b", 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 3, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(leased) != 3 {
		t.Fatalf("FetchTasks: %d tasks, %v", len(leased), err)
	}
	outs := make([]store.Outcome, len(leased))
	for i, l := range leased {
		outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateRetryWaiting, RunAt: now,
			Error: &store.ErrorInfo{Code: "E", Message: "m", Class: "transient"}}
	}
	if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now}); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("RecordOutcomes: %v %v", err, errs)
	}
	// Back to the version-3 layout, then migration 4 again.
	for _, q := range []string{
		`DROP INDEX attempts_finished_brin`,
		`ALTER TABLE attempts ADD PRIMARY KEY (seq)`,
		`CREATE INDEX attempts_finished_idx ON attempts (finished_at)`,
		migrations[3].sql,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT indexname || ' ' || split_part(indexdef, ' USING ', 2) FROM pg_indexes WHERE tablename = 'attempts' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"attempts_finished_brin brin (finished_at) WITH (autosummarize='on')", "attempts_task_idx btree (task_id, seq)"}
	if !slices.Equal(indexes, want) {
		t.Fatalf("attempts indexes after migration 4:\n%q\nwant\n%q", indexes, want)
	}
	for _, l := range leased {
		h, err := s.ListAttempts(ctx, l.ID)
		if err != nil || len(h) != 1 || h[0].Outcome != store.OutcomeFailed {
			t.Fatalf("history of %s after migration: %+v, %v", l.ID, h, err)
		}
	}
	// The statistics window, with scans forced onto an index: the plan
	// uses the BRIN index and the counts are the same as by a full scan.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	prow, err := tx.Query(ctx, `EXPLAIN SELECT count(*) FROM attempts WHERE finished_at >= $1`, now)
	if err != nil {
		t.Fatal(err)
	}
	planLines, err := pgx.CollectRows(prow, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(planLines, "\n"), "attempts_finished_brin") {
		t.Fatalf("statistics window plan does not use the BRIN index:\n%s", strings.Join(planLines, "\n"))
	}
	stats, err := s.Stats(ctx, store.StatsParams{Since: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].FirstAttempts != 3 || stats[0].Failures != 3 {
		t.Fatalf("Stats after migration = %+v, want 3 first attempts, 3 failures", stats)
	}
}

// TestMigrateUpToDateNeedsNoCreatePrivilege: a node running as a role that
// may only read and write the tables (the owner migrated with `retryq
// migrate`) opens an up-to-date database with AutoMigrate, as the server
// does by default: nothing to apply means no DDL, so no CREATE privilege is
// needed.
func TestMigrateUpToDateNeedsNoCreatePrivilege(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	owner := openURL(t, url, nil) // migrated
	role := "app_" + owner.pool.Config().ConnConfig.Database
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + role,
	} {
		if _, err := owner.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The role's grants are in this database, dropped after this
		// cleanup: revoke them here, then the role can go.
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := owner.pool.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	appURL := fmt.Sprintf("postgres://%s@%s:%d/%s", role, cfg.Host, cfg.Port, cfg.Database)
	app, err := Open(ctx, Config{URL: appURL, AutoMigrate: true})
	if err != nil {
		t.Fatalf("Open(AutoMigrate) of an up-to-date database as a role without CREATE: %v", err)
	}
	defer app.Close()
	if err := app.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of an up-to-date database as a role without CREATE: %v", err)
	}
	if _, err := app.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("p", 1), Now: time.Now()}); err != nil {
		t.Fatalf("InsertTasks as the application role: %v", err)
	}
}

// TestMigrateRefusesAnotherToolsHistory: a database whose
// schema_migrations table belongs to another migration tool (here
// golang-migrate's layout, version and dirty) is not taken for a retryq
// schema: whatever version that tool recorded, Open and Migrate refuse it
// with store.ErrForeignSchema instead of calling it newer than the binary,
// calling it up to date, or applying retryq's later migrations to it.
func TestMigrateRefusesAnotherToolsHistory(t *testing.T) {
	t.Parallel()
	for _, version := range []int64{2, int64(KnownVersion()), 20240101120000} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			ctx := t.Context()
			other := openURL(t, url, func(c *Config) { c.AutoMigrate = false })
			for _, q := range []string{
				"CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)",
				fmt.Sprintf("INSERT INTO schema_migrations VALUES (%d, false)", version),
			} {
				if _, err := other.pool.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := other.Migrate(ctx); !errors.Is(err, store.ErrForeignSchema) || errors.Is(err, store.ErrSchemaTooNew) {
				t.Errorf("Migrate: %v, want ErrForeignSchema", err)
			}
			if _, _, err := other.SchemaVersion(ctx); !errors.Is(err, store.ErrForeignSchema) {
				t.Errorf("SchemaVersion: %v, want ErrForeignSchema", err)
			}
			for _, auto := range []bool{false, true} {
				s, err := Open(ctx, Config{URL: url, AutoMigrate: auto})
				if !errors.Is(err, store.ErrForeignSchema) || !strings.Contains(err.Error(), "schema_migrations") {
					t.Errorf("Open(AutoMigrate=%v): %v, want ErrForeignSchema naming schema_migrations", auto, err)
				}
				if s != nil {
					s.Close()
				}
			}
			var tables int
			if err := other.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").Scan(&tables); err != nil || tables != 1 {
				t.Errorf("tables after the refused migrations: %d (%v), want only the other tool's", tables, err)
			}
		})
	}
}

// TestMigrateReportsOnlyWhatItApplied: of several nodes upgrading one
// database at once, only the one that applied the migrations reports them;
// the others, which waited for its lock, find the schema current. They
// wait for it past their lock timeout: that bounds waits for tables, not
// for another node's migration.
func TestMigrateReportsOnlyWhatItApplied(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		t.Fatal(err)
	}
	const n = 3
	type result struct{ from, to int }
	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		nodeURL, timeout := url, 100*time.Millisecond
		if i == 0 { // a lock timeout of the session's own
			nodeURL, timeout = withParam(t, url, "lock_timeout", "100ms"), 0
		}
		s := openURL(t, nodeURL, func(c *Config) { c.AutoMigrate, c.MigrateLockTimeout = false, timeout })
		wg.Go(func() { results[i].from, results[i].to, errs[i] = s.Upgrade(ctx) })
	}
	// Release the lock once every node waits for it.
	deadline := time.Now().Add(30 * time.Second)
	for waiting := 0; waiting < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d migrations wait for the lock after 30s", waiting, n)
		}
		if err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND waitstart < clock_timestamp() - interval '300 ms'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling pg_locks
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	appliers := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("Upgrade %d: %v", i, errs[i])
		}
		if r.to != KnownVersion() {
			t.Errorf("Upgrade %d left version %d, want %d", i, r.to, KnownVersion())
		}
		if r.from != r.to {
			appliers++
			if r.from != 0 {
				t.Errorf("Upgrade %d applied from version %d, want 0", i, r.from)
			}
		}
	}
	if appliers != 1 {
		t.Errorf("%d nodes report applying migrations (%+v), want 1", appliers, results)
	}
}

// TestUpgradeFromEveryVersionKeepsData builds a database at each older
// schema version the way that version's binary left it (its migrations
// recorded in schema_migrations), with tasks in every state, their history
// and task types in that version's layout (storetest.UpgradeFixture), and
// checks that Open with AutoMigrate upgrades it to the current version,
// every record reads back the same and the tasks still work.
func TestUpgradeFromEveryVersionKeepsData(t *testing.T) {
	fx := storetest.NewUpgradeFixture(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	for v := 1; v < KnownVersion(); v++ {
		t.Run(fmt.Sprintf("from_%d", v), func(t *testing.T) {
			url := pgtest.URL(t)
			ctx := t.Context()
			old := atVersion(t, url, v, nil)
			// Before success_in_task_row (3) the success is an attempts
			// row; after it, the task row's detail.
			writeUpgradeFixture(t, old, fx, v >= 3)

			st := openURL(t, url, nil) // AutoMigrate
			if applied, known, err := st.SchemaVersion(ctx); err != nil || applied != known {
				t.Fatalf("SchemaVersion after the upgrade = %d, %d, %v", applied, known, err)
			}
			storetest.CheckUpgradeFixture(ctx, t, st, fx)
			// The deleted tasks' history went with them (no foreign key
			// cascades since migration 2).
			var left int
			if err := st.pool.QueryRow(ctx, "SELECT count(*) FROM attempts WHERE task_id IN ('ok', 'gone')").Scan(&left); err != nil || left != 0 {
				t.Errorf("history rows of the deleted tasks = %d, %v", left, err)
			}
		})
	}
}

// writeUpgradeFixture writes fx's rows through s in the layout of the
// first schema versions (every one so far adds to it, none changes it);
// with successInRow, the success is the task row's detail, else an
// attempts row.
func writeUpgradeFixture(t *testing.T, s *Store, fx storetest.UpgradeFixture, successInRow bool) {
	t.Helper()
	ctx := t.Context()
	ts := func(at time.Time) any {
		if at.IsZero() {
			return nil
		}
		return at
	}
	text := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	blob := func(b []byte) any {
		if len(b) == 0 {
			return nil
		}
		return b
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tk := range fx.Tasks {
		var code, msg, class any
		if e := tk.LastError; e != nil {
			code, msg, class = e.Code, e.Message, e.Class
		}
		exec(`INSERT INTO tasks (id, type, payload, priority, effective_prio, state, attempt, max_attempts, idempotency_key,
			run_at, created_at, updated_at, first_failure_at, last_error_code, last_error_message, last_error_class,
			last_delay_ns, dead_reason, lease_id, lease_expires_at, worker_id, started_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)`,
			tk.ID, tk.Type, []byte(tk.Payload), tk.Priority, tk.EffectivePrio, string(tk.State), tk.Attempt, tk.MaxAttempts,
			text(tk.IdempotencyKey), ts(tk.RunAt), ts(tk.CreatedAt), ts(tk.UpdatedAt), ts(tk.FirstFailureAt),
			code, msg, class, int64(tk.LastDelay), tk.DeadReason, text(tk.LeaseID), ts(tk.LeaseExpiresAt), tk.WorkerID,
			ts(tk.StartedAt))
	}
	attempts := fx.Attempts
	if successInRow {
		exec(`UPDATE tasks SET success_detail = $1 WHERE id = $2`, fx.Success.Detail, fx.Success.TaskID)
	} else {
		attempts = append(attempts[:len(attempts):len(attempts)], fx.Success)
	}
	for _, a := range attempts {
		var code, msg, class any
		if e := a.Error; e != nil {
			code, msg, class = e.Code, e.Message, e.Class
		}
		exec(`INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at, outcome,
			error_code, error_message, error_class, delay_ns, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			a.TaskID, a.TaskType, a.Number, a.WorkerID, ts(a.StartedAt), ts(a.FinishedAt), a.Outcome,
			code, msg, class, int64(a.Delay), a.Detail)
	}
	for _, tc := range fx.Types {
		exec(`INSERT INTO task_types (type, policy, timeout_ns, priority, target, updated_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			tc.Type, blob(tc.Policy), int64(tc.Timeout), tc.Priority, blob(tc.Target), ts(tc.UpdatedAt))
	}
}

// TestFailedMigrationLeavesNoTrace: a database another application owns,
// with a tasks table of its own, is refused (migration 1 cannot create
// retryq's) and keeps exactly its tables and rows: no half-applied
// migration and no empty schema_migrations left behind.
func TestFailedMigrationLeavesNoTrace(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	other := openURL(t, url, func(c *Config) { c.AutoMigrate = false })
	if _, err := other.pool.Exec(ctx, "CREATE TABLE tasks (title text); INSERT INTO tasks VALUES ('buy milk')"); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{URL: url, AutoMigrate: true})
	if err == nil {
		s.Close()
		t.Fatal("Open(AutoMigrate) of another application's database with a tasks table succeeded")
	}
	if !strings.Contains(err.Error(), "0001_init") {
		t.Errorf("Open: %v, want the failing migration named", err)
	}
	var tables string
	if err := other.pool.QueryRow(ctx, "SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = current_schema()").Scan(&tables); err != nil || tables != "tasks" {
		t.Errorf("tables after the failed migration: %q (%v), want only the application's tasks", tables, err)
	}
	if applied, _, err := other.SchemaVersion(ctx); err != nil || applied != 0 {
		t.Errorf("SchemaVersion after the failed migration = %d, %v; want 0", applied, err)
	}
}

// atVersion returns a store on a new database holding retryq's schema at
// version v, as that version's binary left it.
func atVersion(t *testing.T, url string, v int, cfg func(*Config)) *Store {
	t.Helper()
	s := openURL(t, url, func(c *Config) {
		c.AutoMigrate = false
		if cfg != nil {
			cfg(c)
		}
	})
	if _, err := s.pool.Exec(t.Context(), createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:v] {
		if _, err := s.pool.Exec(t.Context(), m.sql); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestMigrateGivesUpWaitingForATableLock: a long transaction has read the
// attempts table that migration 4 alters. The migration waits for its lock
// no longer than its lock timeout, then fails with ErrMigrationLockTimeout
// naming the migration, leaving the schema as it was; it used to wait as
// long as the transaction lasted (every statement on the table queued
// behind its lock meanwhile). The timeout comes from Config, else from the
// session's own lock_timeout (the URL's), else the default.
func TestMigrateGivesUpWaitingForATableLock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		lockTimeout string // the URL's lock_timeout, if any
		cfg         func(*Config)
		before      time.Duration // the migration must fail within this
	}{
		{"config", "", func(c *Config) { c.MigrateLockTimeout = 300 * time.Millisecond }, 20 * time.Second},
		{"session", "300ms", nil, 20 * time.Second},
		{"default", "", nil, DefaultMigrateLockTimeout + 20*time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			storeURL := url
			if c.lockTimeout != "" {
				storeURL = withParam(t, url, "lock_timeout", c.lockTimeout)
			}
			s := atVersion(t, storeURL, 3, c.cfg)
			ctx := t.Context()
			holder := connect(t, url)
			if _, err := holder.Exec(ctx, "BEGIN; SELECT count(*) FROM attempts"); err != nil {
				t.Fatal(err)
			}
			uctx, cancel := context.WithTimeout(ctx, c.before)
			defer cancel()
			start := time.Now()
			_, _, err := s.Upgrade(uctx)
			if err == nil || !errors.Is(err, ErrMigrationLockTimeout) || !errors.Is(err, store.ErrUnavailable) ||
				!strings.Contains(err.Error(), "0004_attempts_lighter_indexes") {
				t.Fatalf("Upgrade behind a transaction holding a table lock after %v: %v; want ErrMigrationLockTimeout naming migration 4",
					time.Since(start).Round(time.Millisecond), err)
			}
			if applied, _, err := s.SchemaVersion(ctx); err != nil || applied != 3 {
				t.Errorf("SchemaVersion after the timeout = %d, %v; want 3", applied, err)
			}
			if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
				t.Fatal(err)
			}
			if from, to, err := s.Upgrade(ctx); err != nil || from != 3 || to != KnownVersion() {
				t.Errorf("Upgrade once the lock is free = %d, %d, %v; want 3, %d", from, to, err, KnownVersion())
			}
		})
	}
}
