package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// BenchmarkInsertTasks inserts batches of 1000 tasks; rows/s is the
// throughput of durable inserts (one commit per batch).
func BenchmarkInsertTasks(b *testing.B) {
	s := openURL(b, pgtest.URL(b), nil)
	ctx := b.Context()
	const batch = 1000
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("b%06d-", i), batch), Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkFetchRecord leases 100 tasks and records 100 outcomes (half
// succeeded, half retried) per iteration; rows/s counts tasks processed.
func BenchmarkFetchRecord(b *testing.B) {
	s := openURL(b, pgtest.URL(b), nil)
	ctx := b.Context()
	const batch = 100
	for i := 0; i < 20; i++ { // keep a backlog larger than one batch
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("pre%03d-", i), 1000), Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	var fetchTime, recordTime time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if i%10 == 9 { // refill
			if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("r%06d-", i), 1000), Now: t0}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t1 := time.Now()
		ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: batch, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
		if err != nil {
			b.Fatal(err)
		}
		if len(ts) != batch {
			b.Fatalf("fetched %d", len(ts))
		}
		outs := make([]store.Outcome, len(ts))
		for j, t := range ts {
			outs[j] = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
			if j%2 == 1 {
				outs[j] = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateRetryWaiting,
					RunAt: t0.Add(time.Hour), EffectivePrio: -1, LastDelay: time.Second,
					Error: &store.ErrorInfo{Code: "E", Message: "boom", Class: "transient"}, OutcomeKind: store.OutcomeFailed}
			}
		}
		t2 := time.Now()
		fetchTime += t2.Sub(t1)
		errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: t0})
		recordTime += time.Since(t2)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(fetchTime.Microseconds())/float64(b.N), "fetch-µs/op")
	b.ReportMetric(float64(recordTime.Microseconds())/float64(b.N), "record-µs/op")
}

// BenchmarkStatementsCycle sends, from one goroutine with nothing else
// running, the statements of one stream cycle as the group writer does: 8
// tasks inserted already leased and the 8 tasks of the previous cycle
// marked succeeded, as one pgx batch (one round trip, one commit). It sits
// between BenchmarkPgbenchStreamFloor (the same writes from pgbench) and
// the engine's stream workload, and reports tasks/s (8 per cycle).
func BenchmarkStatementsCycle(b *testing.B) {
	s := openURL(b, pgtest.URL(b), nil)
	ctx := b.Context()
	var prev []string // ids of the previous cycle's tasks
	var prevLeases []string
	for i := 0; b.Loop(); i++ {
		now := time.Now()
		r := make(insertRows, 0, 8)
		ids, leases := make([]string, 8), make([]string, 8)
		for k := range ids {
			ids[k] = fmt.Sprintf("c%010d-%d", i, k)
			leases[k] = store.NewLeasePrefix() + ids[k]
			row := rowOfTask(ids[k], "bench", []byte(`{"t":1780000000000000000}`), now)
			row.state, row.attempt = string(store.StateRunning), 1
			row.leaseID, row.worker = &leases[k], "bench-host-1234"
			row.leaseExp = us(now.Add(30 * time.Second))
			r = append(r, row)
		}
		batch := &pgx.Batch{}
		sql, args := insertStatement([]insertRows{r}, len(r))
		batch.Queue(sql, args...)
		if prev != nil {
			batch.Queue(outcomePlanSettings)
			batch.Queue(recordSuccessesSQL, prev, prevLeases, make([]bool, len(prev)), make([]int64, len(prev)), make([]string, len(prev)), us(now))
		}
		br := s.pool.SendBatch(ctx, batch)
		for range batch.Len() {
			if _, err := br.Exec(); err != nil {
				b.Fatal(err)
			}
		}
		if err := br.Close(); err != nil {
			b.Fatal(err)
		}
		prev, prevLeases = ids, leases
	}
	b.ReportMetric(8*float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// rowOfTask is the row of one pending task created at now.
func rowOfTask(id, typ string, payload []byte, now time.Time) insertRow {
	return insertRow{id: id, typ: typ, state: string(store.StatePending), payload: payload, max: 3, runAt: us(now), now: us(now)}
}

// BenchmarkFetchBehindOtherTypes leases 10 tasks of one type per iteration
// with 200,000 pending tasks of three other types, due earlier and of
// higher priority, waiting ahead of them in fetch order; us/fetch is the
// time of one FetchTasks, its durable commit included. (Through one index
// in fetch order, filtered by type, each fetch read the whole backlog:
// 28 ms a fetch at 0ddf144, against 1.7 ms since, on the shared 2-core
// machine of docs/benchmarks.md.)
func BenchmarkFetchBehindOtherTypes(b *testing.B) {
	s := openURL(b, pgtest.URL(b), nil)
	ctx := b.Context()
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT format('b%s', lpad(x::text, 10, '0')), 'backlog' || (x % 3), '{}'::bytea, 5, 5, 'pending', $1, $1, $1
FROM generate_series(1, 200000) x`, t0.Add(-time.Hour)); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		b.Fatal(err)
	}
	var fetchTime time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		tasks := newTasks(fmt.Sprintf("live%06d-", i), 10)
		for j := range tasks {
			tasks[j].Type = "live"
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		ts, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"live"}, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
		fetchTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(ts) != 10 {
			b.Fatalf("fetched %d tasks of live, want 10", len(ts))
		}
	}
	b.ReportMetric(float64(fetchTime.Microseconds())/float64(b.N), "us/fetch")
}
