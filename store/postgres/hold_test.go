package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestOutcomeHeldFromInsertGroup: an outcome batch queued beside an
// insert is left out of the insert's commit and sent right after it, on
// its own, since nothing else follows: two commits where there used to be
// one, and the outcome is applied.
func TestOutcomeHeldFromInsertGroup(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx := t.Context()
	now := time.Now()
	task := leased(t, s, "h", 1, now)[0]

	x := connect(t, url)
	if _, err := x.Exec(ctx, "SELECT pg_advisory_lock(1)"); err != nil {
		t.Fatal(err)
	}
	blocker := lockWrite(ctx, 1) // keeps the writer busy while the two queue up
	s.wq.push(blocker)
	waitAdvisoryWaiter(t, x)

	inserted := make(chan error, 1)
	go func() {
		_, err := s.InsertTasks(context.Background(), store.InsertParams{Tasks: newTasks("h-new", 1), Now: now})
		inserted <- err
	}()
	waitQueued(t, s, 1)
	recorded := make(chan []error, 1)
	go func() {
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
			TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
		if err != nil {
			errs = []error{err}
		}
		recorded <- errs
	}()
	waitQueued(t, s, 2)
	before := s.GroupStats()
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	if err := <-blocker.done; err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	select {
	case err := <-inserted:
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	case <-timeout:
		t.Fatal("the insert never committed")
	}
	select {
	case errs := <-recorded:
		if errs[0] != nil {
			t.Fatalf("outcome: %v", errs[0])
		}
	case <-timeout:
		t.Fatal("the held outcome was never sent")
	}
	after := s.GroupStats()
	// The blocker's group is counted when its statements return, after the
	// snapshot; the insert and the outcome went out in two more.
	if n := after.Groups - before.Groups; n != 3 {
		t.Fatalf("%d groups from the blocker, the insert and the outcome; want 3 (the outcome held out of the insert's group)", n)
	}
	if got, err := s.GetTask(ctx, task.ID); err != nil || got.State != store.StateSucceeded {
		t.Fatalf("task after the outcome: %v %v", got.State, err)
	}
}
