package postgres

import (
	"fmt"
	"testing"
	"time"

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
