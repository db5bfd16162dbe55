package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestDeleteFinishedWithoutLimitRunsInRounds: DeleteFinished without a
// Limit deletes in rounds of at most retentionRound tasks per class, each
// its own transaction, and reports the exact totals: as one transaction
// it deleted, locked and wrote to the WAL the whole of a large table at
// once. A statement trigger records the transaction of every deletion
// from tasks.
func TestDeleteFinishedWithoutLimitRunsInRounds(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 2*retentionRound + 100
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{ID: fmt.Sprintf("t_%05d", i), Type: []string{"a", "b"}[i%2], Payload: []byte(`1`)}
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"a", "b"}, Limit: n, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(got) != n {
		t.Fatalf("FetchTasks: %d tasks, %v", len(got), err)
	}
	outs := make([]store.Outcome, n)
	for i, task := range got {
		outs[i] = store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded}
	}
	if _, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE deleting_xacts (x text)`,
		`CREATE FUNCTION note_deleting_xact() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO deleting_xacts VALUES (pg_current_xact_id()::text); RETURN NULL; END $$`,
		`CREATE TRIGGER note_deleting_xact AFTER DELETE ON tasks FOR EACH STATEMENT EXECUTE FUNCTION note_deleting_xact()`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res != (store.RetentionResult{Succeeded: n}) {
		t.Fatalf("DeleteFinished: %+v, want %d succeeded", res, n)
	}
	var xacts int
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT x) FROM deleting_xacts`).Scan(&xacts); err != nil {
		t.Fatal(err)
	}
	if xacts < 3 {
		t.Fatalf("DeleteFinished of %d tasks without a Limit deleted in %d transactions, want one per %d tasks at most (3)", n, xacts, retentionRound)
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
