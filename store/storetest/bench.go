package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// Benchmark helpers shared by the backends. Each reports "rows/s" (tasks
// moved per second) besides ns/op. The store must be empty unless stated.

var benchPayload = json.RawMessage(`{"to":"user@example.com","template":"welcome","vars":{"name":"Ada","n":42}}`)

// Fill inserts n tasks of type typ in batches of 5000, all pending at now
// (or all scheduled when runAt is after now). ids are prefix-0000000001...
func Fill(tb testing.TB, s store.Store, prefix, typ string, n int, now, runAt time.Time) {
	tb.Helper()
	ctx := context.Background()
	batch := make([]store.NewTask, 0, 5000)
	for i := 0; i < n; {
		batch = batch[:0]
		for ; i < n && len(batch) < cap(batch); i++ {
			batch = append(batch, store.NewTask{ID: fmt.Sprintf("%s%010d", prefix, i), Type: typ, Payload: benchPayload, RunAt: runAt})
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: batch, Now: now}); err != nil {
			tb.Fatalf("fill: %v", err)
		}
	}
}

func reportRows(b *testing.B, rows int) {
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchInsert measures InsertTasks of batch new tasks per operation.
func BenchInsert(b *testing.B, s store.Store, batch int) {
	ctx := context.Background()
	tasks := make([]store.NewTask, batch)
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range tasks {
			tasks[j] = store.NewTask{ID: fmt.Sprintf("ins%012d", n), Type: "bench", Payload: benchPayload}
			n++
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: base}); err != nil {
			b.Fatal(err)
		}
	}
	reportRows(b, n)
}

// BenchFetchComplete measures, per operation, FetchTasks of batch tasks and
// one RecordOutcomes completing them all (setup inserts b.N*batch tasks).
func BenchFetchComplete(b *testing.B, s store.Store, batch int) {
	ctx := context.Background()
	Fill(b, s, "fc", "bench", b.N*batch, base, time.Time{})
	outs := make([]store.Outcome, 0, batch)
	done := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := base.Add(time.Duration(i) * time.Millisecond)
		ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: batch, WorkerID: "bench", LeaseDuration: time.Minute, Now: now})
		if err != nil {
			b.Fatal(err)
		}
		outs = outs[:0]
		for _, t := range ts {
			outs = append(outs, store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded})
		}
		errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now})
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		done += len(ts)
	}
	reportRows(b, done)
}

// BenchPipeline measures the whole life of batch tasks per operation:
// insert, fetch (in fetchBatch chunks) and complete.
func BenchPipeline(b *testing.B, s store.Store, batch, fetchBatch int) {
	ctx := context.Background()
	tasks := make([]store.NewTask, batch)
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := base.Add(time.Duration(i) * time.Millisecond)
		for j := range tasks {
			tasks[j] = store.NewTask{ID: fmt.Sprintf("pl%012d", n), Type: "bench", Payload: benchPayload}
			n++
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: now}); err != nil {
			b.Fatal(err)
		}
		for left := batch; left > 0; {
			ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: fetchBatch, WorkerID: "bench", LeaseDuration: time.Minute, Now: now})
			if err != nil {
				b.Fatal(err)
			}
			if len(ts) == 0 {
				b.Fatal("fetched nothing")
			}
			outs := make([]store.Outcome, len(ts))
			for k, t := range ts {
				outs[k] = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
			}
			recordAll(b, s, outs, now)
			left -= len(ts)
		}
	}
	reportRows(b, n)
}

// recordAll records outs and fails the benchmark unless every one applied.
func recordAll(b *testing.B, s store.Store, outs []store.Outcome, now time.Time) {
	errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Outcomes: outs, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchFetchWaiting measures FetchTasks of batch tasks while waiting other
// tasks are pending; the fetched tasks are released (untimed) so the
// population stays constant. Every fetch must return a full batch: rows/s
// counts the rows fetched, and a fetch that came back short (releases
// refused, population used up) would be a cheaper operation than the one
// named.
func BenchFetchWaiting(b *testing.B, s store.Store, waiting, batch int) {
	ctx := context.Background()
	Fill(b, s, "w", "bench", waiting, base, time.Time{})
	rows := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := base.Add(time.Duration(i) * time.Millisecond)
		ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: batch, WorkerID: "bench", LeaseDuration: time.Minute, Now: now})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if len(ts) != min(batch, waiting) {
			b.Fatalf("fetch %d: %d tasks, want %d", i, len(ts), min(batch, waiting))
		}
		rows += len(ts)
		outs := make([]store.Outcome, len(ts))
		for k, t := range ts {
			outs[k] = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending}
		}
		recordAll(b, s, outs, now)
		b.StartTimer()
	}
	reportRows(b, rows)
}

// BenchPromoteWaiting measures PromoteDue of batch due tasks while waiting
// other tasks are scheduled far in the future. Setup inserts b.N*batch
// scheduled tasks that fall due batch at a time.
func BenchPromoteWaiting(b *testing.B, s store.Store, waiting, batch int) {
	ctx := context.Background()
	Fill(b, s, "w", "bench", waiting, base, base.Add(24*time.Hour))
	due := make([]store.NewTask, batch)
	for i := 0; i < b.N; i++ {
		for j := range due {
			due[j] = store.NewTask{ID: fmt.Sprintf("d%06d-%06d", i, j), Type: "bench", Payload: benchPayload,
				RunAt: base.Add(time.Duration(i+1) * time.Millisecond)}
		}
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: due, Now: base}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := s.PromoteDue(ctx, store.PromoteParams{Limit: batch, Now: base.Add(time.Duration(i+1) * time.Millisecond)})
		if err != nil {
			b.Fatal(err)
		}
		if n != batch {
			b.Fatalf("promoted %d, want %d", n, batch)
		}
	}
	reportRows(b, b.N*batch)
}
