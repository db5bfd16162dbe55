package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestCancelWaitingOnARetryCancelsTheRetriedTask: a cancel that waits for
// the row lock of a transaction putting a dead task back to pending (a
// retry or a redrive committing) cancels the task once that commits. It
// used to answer a conflict naming the state it could cancel ("cannot
// cancel a pending task"): the update judged the row by the version its
// statement's snapshot saw (dead), and the state read after it saw the
// committed one (pending).
func TestCancelWaitingOnARetryCancelsTheRetriedTask(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	s := openURL(t, dbURL, nil)
	ctx := t.Context()
	tasks := leased(t, s, "c", 1, t0)
	killAll(t, s, tasks, t0)
	id := tasks[0].ID

	x := connect(t, dbURL)
	tx, err := x.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "UPDATE tasks SET state = 'pending', updated_at = $2 WHERE id = $1", id, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		task store.Task
		err  error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.CancelTask(ctx, store.CancelParams{ID: id, Now: t0.Add(2 * time.Second)})
		done <- result{got, err}
	}()
	waitUntil(t, connect(t, dbURL), "the cancel to wait for the row lock", `SELECT count(*) > 0 FROM pg_stat_activity
	WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancel did not finish once the lock was released")
	}
	if r.err != nil || r.task.State != store.StateCancelled {
		t.Fatalf("cancel of a task retried meanwhile = %s, %v; want cancelled", r.task.State, r.err)
	}
	if got, err := s.GetTask(ctx, id); err != nil || got.State != store.StateCancelled {
		t.Fatalf("task after the cancel: %s, %v; want cancelled", got.State, err)
	}
}
