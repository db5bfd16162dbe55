package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// Tests of the claim that the store works behind a transaction-mode
// connection pooler when PollOnly is set: every statement goes through a
// real PgBouncer (pool_mode = transaction), so consecutive transactions of
// one client connection may run on different server connections, and
// named prepared statements or session state would break.

// pollOnly configures a store for a transaction-mode pooler.
func pollOnly(maxConns int32) func(*Config) {
	return func(c *Config) {
		c.PollOnly = true
		c.MaxConns = maxConns
	}
}

// TestPoolerConformance runs the store contract suite through one PgBouncer
// in transaction mode. Subtests get their databases from a few migrated
// databases, emptied between subtests (see recycledDBs): creating and
// dropping a database per subtest would cost more than the suite itself.
func TestPoolerConformance(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	b := pgtest.NewBouncer(t, direct)
	// Migrated through the bouncer (AutoMigrate).
	openURL(t, b.URL(direct), pollOnly(2)).Close()
	dbs := recycledDBs(t, direct, min(4, max(2, runtime.GOMAXPROCS(0))))
	storetest.Run(t, func(t *testing.T) store.Store {
		return openURL(t, b.URL(dbs(t)), pollOnly(4))
	})
}

// recycledDBs creates n migrated databases (the first is dbURL, already
// migrated) and returns a function handing one out to a test, emptied
// again and given back when that test ends (after the test's own
// cleanups, which close its store). It waits while all n are in use.
func recycledDBs(t *testing.T, dbURL string, n int) func(t *testing.T) string {
	free := make(chan string, n)
	free <- dbURL
	for range n - 1 {
		u := pgtest.URL(t)
		openURL(t, u, nil).Close()
		free <- u
	}
	return func(t *testing.T) string {
		t.Helper()
		var u string
		select {
		case u = <-free:
		case <-t.Context().Done():
			t.Fatal("no free database")
		}
		t.Cleanup(func() {
			if err := emptyDB(u); err != nil {
				t.Errorf("empty database for the next test: %v", err)
			}
			free <- u
		})
		return u
	}
}

// emptyDB deletes all rows but the schema version, directly on the server.
func emptyDB(dbURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `DO $$
DECLARE tables text;
BEGIN
	SET LOCAL lock_timeout = '20s';
	SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO tables
	FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'schema_migrations';
	IF tables IS NOT NULL THEN
		EXECUTE 'TRUNCATE ' || tables || ' RESTART IDENTITY CASCADE';
	END IF;
END $$`)
	return err
}

// TestPoolerInterleaved runs concurrent inserts, fetches, outcomes, lease
// extensions and reads from two stores (two nodes) with 8 client
// connections each through a PgBouncer with only 2 server connections, so
// client connections keep switching server connections between
// transactions. Every task must end succeeded, with no lease lost, and the
// plan settings the hot paths set per transaction must not leak into the
// server sessions.
func TestPoolerInterleaved(t *testing.T) {
	t.Parallel()
	// server_round_robin hands idle server connections out in turn, so
	// that the switching checked at the end is deterministic.
	url := pgtest.PgBouncer(t, pgtest.URL(t), "default_pool_size = 2", "server_round_robin = 1")
	nodes := []*Store{openURL(t, url, pollOnly(8)), openURL(t, url, pollOnly(8))}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const (
		producers = 4
		batches   = 15 // per producer
		batchSize = 5
		workers   = 4
		total     = producers * batches * batchSize
	)
	var (
		inserted, succeeded atomic.Int64
		producing           sync.WaitGroup
		wg                  sync.WaitGroup
		fail                = func(format string, args ...any) { t.Errorf(format, args...); cancel() }
	)
	for p := range producers {
		producing.Add(1)
		wg.Go(func() {
			defer producing.Done()
			s := nodes[p%2]
			for i := range batches {
				ts := newTasks(fmt.Sprintf("p%d-%02d-", p, i), batchSize)
				if i%3 == 0 {
					// Idempotency keys take the transaction path, and a
					// repeated key must come back as a duplicate.
					for j := range ts {
						ts[j].IdempotencyKey = ts[j].ID
					}
					ts = append(ts, store.NewTask{ID: ts[0].ID + "-dup", Type: "email", IdempotencyKey: ts[0].ID})
				}
				res, err := s.InsertTasks(ctx, store.InsertParams{Tasks: ts, Now: t0})
				if err != nil {
					fail("InsertTasks: %v", err)
					return
				}
				for _, r := range res {
					if !r.Duplicate {
						inserted.Add(1)
					} else if r.Task.ID != ts[0].ID {
						fail("duplicate of %s returned %s", ts[0].ID, r.Task.ID)
					}
				}
			}
		})
	}
	producersDone := make(chan struct{})
	go func() { producing.Wait(); close(producersDone) }()

	for w := range workers {
		wg.Go(func() {
			s := nodes[w%2]
			worker := fmt.Sprintf("w%d", w)
			for n := 0; succeeded.Load() < total && ctx.Err() == nil; n++ {
				ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: 4, WorkerID: worker, LeaseDuration: time.Minute, Now: t0})
				if err != nil {
					fail("FetchTasks: %v", err)
					return
				}
				if len(ts) == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
					continue
				}
				if n%2 == 0 {
					leases := make([]store.LeaseRef, len(ts))
					for i, task := range ts {
						leases[i] = store.LeaseRef{TaskID: task.ID, LeaseID: task.LeaseID, ExpiresAt: t0.Add(2 * time.Minute)}
					}
					errs, err := s.ExtendLeases(ctx, store.ExtendParams{Leases: leases, Now: t0})
					if err = errors.Join(append(errs, err)...); err != nil {
						fail("ExtendLeases: %v", err)
						return
					}
				}
				outs := make([]store.Outcome, len(ts))
				for i, task := range ts {
					outs[i] = store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded,
						OutcomeKind: store.OutcomeSucceeded}
					if task.Attempt == 1 && retried(task.ID) {
						// Fail the first attempt of some tasks: a retry due
						// at once goes back to pending and is fetched again.
						outs[i] = store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateRetryWaiting,
							RunAt: t0, Error: &store.ErrorInfo{Code: "E", Message: "boom"},
							LastDelay: time.Millisecond, OutcomeKind: store.OutcomeFailed}
					}
				}
				errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: t0})
				if err = errors.Join(append(errs, err)...); err != nil {
					fail("RecordOutcomes: %v", err)
					return
				}
				for _, o := range outs {
					if o.State == store.StateSucceeded {
						succeeded.Add(1)
					}
				}
			}
		})
	}

	// Reads and scheduler calls, in transactions (Stats sets the
	// isolation level of its own) and single statements.
	wg.Go(func() {
		s := nodes[0]
		for i := 0; ; i++ {
			select {
			case <-producersDone:
				if succeeded.Load() >= total || ctx.Err() != nil {
					return
				}
			default:
			}
			if ctx.Err() != nil {
				return
			}
			var err error
			switch i % 5 {
			case 0:
				_, err = s.Stats(ctx, store.StatsParams{Since: t0.Add(-time.Hour)})
			case 1:
				_, err = s.NextWakeup(ctx, store.WakeupParams{})
			case 2:
				_, err = s.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: t0})
			case 3:
				_, _, err = s.ListTasks(ctx, store.ListParams{Limit: 10})
			case 4:
				_, err = s.ExpiredLeases(ctx, store.ExpiredParams{Limit: 10, Now: t0})
			}
			if err != nil {
				fail("admin call %d: %v", i%5, err)
				return
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}
	if inserted.Load() != total || succeeded.Load() != total {
		t.Fatalf("inserted %d, succeeded %d, want %d", inserted.Load(), succeeded.Load(), total)
	}
	stats, err := nodes[1].Stats(ctx, store.StatsParams{Since: t0.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const retries = total * 2 / batchSize // ids ending in 1 and 3
	if len(stats) != 1 || stats[0].Counts[store.StateSucceeded] != total || len(stats[0].Counts) != 1 ||
		stats[0].FirstAttempts != total || stats[0].Retries != retries || stats[0].Failures != retries {
		t.Fatalf("stats %+v, want all %d tasks succeeded, %d of them at the second attempt", stats, total, retries)
	}
	got, err := nodes[1].GetTask(ctx, "p0-00-000001")
	if err != nil || got.Attempt != 2 {
		t.Fatalf("GetTask of a retried task: attempt %d, %v", got.Attempt, err)
	}
	hist, err := nodes[1].ListAttempts(ctx, got.ID)
	if err != nil || len(hist) != 2 {
		t.Fatalf("ListAttempts: %d attempts, %v", len(hist), err)
	}

	// One client connection: its transactions run on both server
	// connections in turn, and neither carries the plan settings that
	// fetches and outcomes set for their own transaction.
	conn, err := nodes[0].Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pids := map[uint32]bool{}
	for range 10 {
		var pid uint32
		var settings string
		err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), concat_ws(',', current_setting('enable_seqscan'),
			current_setting('enable_bitmapscan'), current_setting('enable_sort'), current_setting('enable_hashjoin'),
			current_setting('enable_mergejoin'))`).Scan(&pid, &settings)
		if err != nil {
			t.Fatal(err)
		}
		if settings != "on,on,on,on,on" {
			t.Errorf("server connection %d: plan settings %s leaked from a transaction", pid, settings)
		}
		pids[pid] = true
	}
	if len(pids) != 2 {
		t.Errorf("one client connection ran on %d server connections, want 2 (default_pool_size = 2)", len(pids))
	}
}

// retried reports whether TestPoolerInterleaved fails the first attempt
// of task id (ids ending in an odd digit below 5; batches are of 5).
func retried(id string) bool {
	return strings.HasSuffix(id, "1") || strings.HasSuffix(id, "3")
}

// TestPollOnlyExecMode checks the query exec mode Open picks: pgx's default
// (named prepared statements) normally, and with PollOnly the mode that
// only uses the unnamed statement, unless the URL names one.
func TestPollOnlyExecMode(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	withParam := url + " default_query_exec_mode=exec"
	if strings.Contains(url, "://") {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		withParam = url + sep + "default_query_exec_mode=exec"
	}
	for _, tc := range []struct {
		url      string
		pollOnly bool
		want     pgx.QueryExecMode
	}{
		{url, false, pgx.QueryExecModeCacheStatement},
		{url, true, pgx.QueryExecModeCacheDescribe},
		{withParam, true, pgx.QueryExecModeExec},
		{withParam, false, pgx.QueryExecModeExec},
	} {
		s := openURL(t, tc.url, func(c *Config) { c.PollOnly = tc.pollOnly })
		if got := s.Pool().Config().ConnConfig.DefaultQueryExecMode; got != tc.want {
			t.Errorf("PollOnly=%v, URL param %v: exec mode %v, want %v", tc.pollOnly, tc.url == withParam, got, tc.want)
		}
		s.Close()
	}
}
