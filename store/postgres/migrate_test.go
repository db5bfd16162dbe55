package postgres

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
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
