package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// passCountingPG counts the scheduler's passes (one NextWakeup each) on a
// PostgreSQL store.
type passCountingPG struct {
	*postgres.Store
	passes atomic.Int64
}

func (s *passCountingPG) NextWakeup(ctx context.Context, p store.WakeupParams) (store.Wakeup, error) {
	s.passes.Add(1)
	return s.Store.NextWakeup(ctx, p)
}

// TestLockedDueTaskDoesNotSpinTheScheduler: on PostgreSQL, promotion skips
// the due tasks whose rows another transaction holds locked (SKIP LOCKED),
// without an error. Such a task is still the earliest due time NextWakeup
// reports, and the scheduler must not take it as a reason to run its next
// pass at once, over and over, for as long as the lock is held: it tries
// again after the poll interval. Before, it ran a pass after another with
// no pause (hundreds a second), each with its statements.
func TestLockedDueTaskDoesNotSpinTheScheduler(t *testing.T) {
	url := pgtest.URL(t)
	st := &passCountingPG{Store: openPG(t, url)}
	ctx := context.Background()
	now := time.Now()
	due := now.Add(50 * time.Millisecond) // scheduled at insert, due before the engine starts
	res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{
		ID: NewID(now), Type: "locked.t", Payload: []byte("null"), RunAt: due}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].Task.ID
	// Another session holds the due task's row locked (an operator's open
	// transaction, another program's).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the task to be due", func() bool { return time.Now().After(due) })
	const poll = 200 * time.Millisecond
	e := startWorkerEngine(t, st, Config{NodeID: "locked-test", PollInterval: poll})
	waitFor(t, "the scheduler to lead", e.IsLeader)
	start, before := time.Now(), st.passes.Load()
	waitFor(t, "a second of scheduling", func() bool { return time.Since(start) >= time.Second })
	passes, elapsed := st.passes.Load()-before, time.Since(start)
	if limit := int64(elapsed/poll) + 3; passes > limit {
		t.Fatalf("%d scheduler passes in %v while a due task's row is locked; want at most %d (one per poll interval %v)", passes, elapsed, limit, poll)
	}
	if s := taskStateOf(t, st, id); s != store.StateScheduled {
		t.Fatalf("locked task is %s while locked; want still scheduled", s)
	}

	// Once the lock goes, the task is promoted within a poll interval or so.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to be promoted once unlocked", func() bool { return taskStateOf(t, st, id) == store.StatePending })
}
