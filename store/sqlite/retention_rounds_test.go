package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestDeleteFinishedWithoutLimitRunsInRounds: DeleteFinished without a
// Limit deletes in rounds of at most retentionRound tasks per class, each
// its own write of the single writer, and reports the exact totals: as
// one transaction it held the writer, and so every enqueue, for the
// whole deletion of a large table.
func TestDeleteFinishedWithoutLimitRunsInRounds(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const n = 2*retentionRound + 100
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{ID: fmt.Sprintf("t_%05d", i), Type: []string{"a", "b"}[i%2], Payload: []byte(`1`)}
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: base}); err != nil {
		t.Fatal(err)
	}
	got, err := s.FetchTasks(ctx, store.FetchParams{Limit: n, WorkerID: "w", LeaseDuration: time.Minute, Now: base})
	if err != nil || len(got) != n {
		t.Fatalf("FetchTasks: %d tasks, %v", len(got), err)
	}
	outs := make([]store.Outcome, n)
	for i, task := range got {
		outs[i] = store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded}
	}
	if _, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: base}); err != nil {
		t.Fatal(err)
	}
	before := s.GroupStats().Writes
	res, err := s.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: base.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res != (store.RetentionResult{Succeeded: n}) {
		t.Fatalf("DeleteFinished: %+v, want %d succeeded", res, n)
	}
	if writes := s.GroupStats().Writes - before; writes < 3 {
		t.Fatalf("DeleteFinished of %d tasks without a Limit took %d writes, want one per %d tasks at most (3)", n, writes, retentionRound)
	}
	st, err := s.Stats(ctx, store.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, ts := range st {
		deleted += ts.RetentionDeleted[store.StateSucceeded]
	}
	if deleted != n {
		t.Fatalf("retention totals count %d deletions, want %d", deleted, n)
	}
}
