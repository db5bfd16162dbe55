package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestInsertNotifiesOnlyForInsertedTasks: an insert whose keyed tasks all
// turn out to be duplicates adds nothing a fetcher could take, so it sends
// no wake-up. It used to notify whenever the batch it was given held a
// task that would not start running, inserted or not: every node's
// fetchers woke and queried for nothing on each repeated key (a client
// retrying its requests, a producer re-sending a backlog).
func TestInsertNotifiesOnlyForInsertedTasks(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	wakeups := wakeupCounter(ctx, t, s, url)
	insert := func(tasks ...store.NewTask) []store.InsertResult {
		t.Helper()
		res, err := s.InsertTasks(ctx, store.InsertParams{Now: t0, Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	scheduled := store.NewTask{ID: "s1", Type: "x", IdempotencyKey: "ks", RunAt: t0.Add(time.Hour)}
	insert(store.NewTask{ID: "p1", Type: "x", IdempotencyKey: "kp"}, scheduled)
	if n := wakeups("first"); n != 1 {
		t.Fatalf("inserting new tasks sent %d wake-ups, want 1", n)
	}
	res := insert(store.NewTask{ID: "p2", Type: "x", IdempotencyKey: "kp"},
		store.NewTask{ID: "s2", Type: "x", IdempotencyKey: "ks", RunAt: t0.Add(time.Hour)})
	if !res[0].Duplicate || !res[1].Duplicate {
		t.Fatalf("repeated keys: %+v, want duplicates", res)
	}
	if n := wakeups("duplicates"); n != 0 {
		t.Errorf("an insert of duplicates only sent %d wake-ups, want 0", n)
	}
	insert(store.NewTask{ID: "p3", Type: "x", IdempotencyKey: "kp"}, store.NewTask{ID: "p4", Type: "x", IdempotencyKey: "new"})
	if n := wakeups("one new"); n != 1 {
		t.Errorf("an insert with one new task sent %d wake-ups, want 1", n)
	}
}

// TestKeyedInsertWhoseDuplicateRetentionDeletedInsertsAnew: retention
// deletes the finished task holding an idempotency key after a keyed
// insert found the key taken and before it read that task back. The key
// is free again, so the enqueue must insert its task anew. It used to fail
// with store.ErrUnavailable (a 503 to an API client), though nothing was
// unavailable and retrying alone could not be told apart from a real
// outage.
func TestKeyedInsertWhoseDuplicateRetentionDeletedInsertsAnew(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	old := store.NewTask{ID: "old", Type: "x", IdempotencyKey: "a-key"}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: t0, Tasks: []store.NewTask{old}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelTask(ctx, store.CancelParams{ID: old.ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// Another transaction holds "b-key", uncommitted: the insert below
	// finds "a-key" taken, then waits on "b-key" (rows go in key order).
	x := connect(t, url)
	tx, err := x.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	row := rowOfTask("holder", "x", nil, t0)
	key := "b-key"
	row.key = &key
	if _, err := tx.Exec(ctx, insertTasksSQL, insertRows{row}.args()...); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res []store.InsertResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.InsertTasks(ctx, store.InsertParams{Now: t0.Add(time.Second), Tasks: []store.NewTask{
			{ID: "new-a", Type: "x", IdempotencyKey: "a-key"}, {ID: "new-b", Type: "x", IdempotencyKey: "b-key"}}})
		done <- answer{res, err}
	}()
	w := connect(t, url)
	waitUntil(t, w, "the keyed insert to wait for the other transaction's key", `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	res, err := s.DeleteFinished(ctx, store.RetentionParams{CancelledBefore: t0.Add(time.Hour)})
	if err != nil || res.Cancelled != 1 {
		t.Fatalf("retention = %+v, %v; want the old task deleted", res, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		t.Fatal("the keyed insert never answered")
	}
	if a.err != nil {
		if errors.Is(a.err, store.ErrUnavailable) {
			t.Fatalf("keyed insert whose duplicate retention deleted: %v; want the task inserted anew", a.err)
		}
		t.Fatal(a.err)
	}
	for i, id := range []string{"new-a", "new-b"} {
		if r := a.res[i]; r.Duplicate || r.Task.ID != id {
			t.Errorf("result %d = %s (duplicate %v); want %s inserted", i, r.Task.ID, r.Duplicate, id)
		}
		if got, err := s.GetTask(ctx, id); err != nil || got.State != store.StatePending {
			t.Errorf("task %s: %s, %v; want it pending", id, got.State, err)
		}
	}
}

// TestKeyedInsertAnswersItsCommitAfterItsCallerGaveUp: a keyed insert
// commits its rows in one statement and reads the tasks holding its taken
// keys in another. Once the first has committed, the batch is stored, so a
// caller whose ctx ends before the read must still be told what was stored.
// It used to be told the insert failed (context canceled) while its
// keyless tasks were committed: retried, they were enqueued twice, and
// EnqueueMany's "all or none" did not hold.
func TestKeyedInsertAnswersItsCommitAfterItsCallerGaveUp(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Another transaction holds "k", uncommitted: the insert waits for it.
	x := connect(t, url)
	tx, err := x.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	row := rowOfTask("holder", "x", nil, t0)
	key := "k"
	row.key = &key
	if _, err := tx.Exec(ctx, insertTasksSQL, insertRows{row}.args()...); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res []store.InsertResult
		err error
	}
	done := make(chan answer, 1)
	callCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	go func() {
		res, err := s.InsertTasks(callCtx, store.InsertParams{Now: t0.Add(time.Second), Tasks: []store.NewTask{
			{ID: "free", Type: "x"}, {ID: "mine", Type: "x", IdempotencyKey: "k"}}})
		done <- answer{res, err}
	}()
	w := connect(t, url)
	waiting := func(what, like string) {
		t.Helper()
		waitUntil(t, w, what, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, like)
	}
	waiting("the keyed insert to wait for the other transaction's key", "%INSERT INTO tasks%")
	// A third session queues for the whole table behind the insert: it
	// gets the table once the insert committed, and holds the read-back.
	y := connect(t, url)
	ytx, err := y.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ytx.Rollback(context.Background()) }()
	locked := make(chan error, 1)
	go func() {
		_, err := ytx.Exec(ctx, "LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
		locked <- err
	}()
	waiting("the table lock to queue behind the insert", "LOCK TABLE%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	waiting("the read-back of the taken key to wait for the table", "%idempotency_key = ANY%")
	giveUp()
	// The read must not give up with its caller: no answer may come before
	// the table is free. (A wrongly cancelled read answers within
	// milliseconds; waiting longer only slows the passing case.)
	var a answer
	got := false
	select {
	case a = <-done:
		got = true
	case <-time.After(2 * time.Second):
	}
	if err := ytx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !got {
		select {
		case a = <-done:
		case <-ctx.Done():
			t.Fatal("the keyed insert never answered")
		}
	}
	if _, err := s.GetTask(ctx, "free"); err != nil {
		t.Fatalf("keyless task of the batch: %v; want it stored", err)
	}
	if a.err != nil {
		t.Fatalf("insert whose caller gave up after its commit: %v; want its results (its tasks are stored)", a.err)
	}
	if r := a.res[0]; r.Duplicate || r.Task.ID != "free" {
		t.Errorf("result 0 = %s (duplicate %v); want free inserted", r.Task.ID, r.Duplicate)
	}
	if r := a.res[1]; !r.Duplicate || r.Task.ID != "holder" {
		t.Errorf("result 1 = %s (duplicate %v); want a duplicate of holder", r.Task.ID, r.Duplicate)
	}
}
