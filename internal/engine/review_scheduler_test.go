package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// insertDue inserts one task due after d straight into the store (as another
// node would) and returns its id.
func reviewInsertDue(t *testing.T, st store.Store, typ string, d time.Duration) string {
	t.Helper()
	now := time.Now()
	res, err := st.InsertTasks(context.Background(), store.InsertParams{Now: now, Tasks: []store.NewTask{{
		ID: NewID(now), Type: typ, Payload: []byte("null"), RunAt: now.Add(d)}}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Task.ID
}

func reviewState(t *testing.T, st store.Store, id string) store.State {
	t.Helper()
	got, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return got.State
}

// TestReviewStuckSchedulerCallKeepsLeadership: one scheduler statement hangs
// (a silently dropped connection: it only ends when its context does),
// while the lease renewals, on other connections, keep succeeding. The
// scheduler's store calls have no bound of their own and the watchdog only
// fires when renewals fail, so the leader keeps the lease with its loops
// stuck: nothing is promoted or reaped anywhere in the cluster, and no
// standby can take over. (heartbeatLoop bounds each call for this very
// reason; the scheduler does not.)
func TestReviewStuckSchedulerCallKeepsLeadership(t *testing.T) {
	const ttl = time.Second
	st := newLeaderStore(t)
	var calls atomic.Int64
	st.promote = func(ctx context.Context, gen int) {
		if calls.Add(1) == 2 { // only the second statement hangs
			<-ctx.Done()
		}
	}
	e := startLeaderEngine(t, st, "stuck-leader", ttl, nil)
	waitFor(t, "the scheduler's second pass to hang", func() bool { return calls.Load() >= 2 })
	standby := startLeaderEngine(t, st, "standby", ttl, nil)

	id := reviewInsertDue(t, st, "review.stuck", 100*time.Millisecond)
	time.Sleep(4 * ttl)
	if s := reviewState(t, st, id); s != store.StatePending {
		t.Fatalf("after 4 TTLs: task due 100ms after insert is %s; leader %q leads %v (its loops stuck in one statement), standby leads %v; want it promoted",
			s, e.NodeID(), e.IsLeader(), standby.IsLeader())
	}
}

// retentionBacklogStore: every DeleteFinished takes 100 ms and finds a full
// batch of succeeded tasks to delete (a retention backlog).
type retentionBacklogStore struct {
	store.Store
	calls atomic.Int64
}

func (s *retentionBacklogStore) DeleteFinished(ctx context.Context, p store.RetentionParams) (store.RetentionResult, error) {
	s.calls.Add(1)
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return store.RetentionResult{}, ctx.Err()
	}
	return store.RetentionResult{Succeeded: p.Limit}, nil
}

// TestReviewRetentionBacklogStarvesPromotion: retention runs inline in the
// scheduler loop, up to 100 batches per run, so a retention backlog holds
// promotion and reaping back for the whole run (here 100 x 100 ms = 10 s;
// on a real backlog, each batch deletes up to 30 000 rows with their
// attempts). A task due 200 ms after the first pass is promoted only when
// retention ends, not at its due time.
func TestReviewRetentionBacklogStarvesPromotion(t *testing.T) {
	inner := openWorkerStoreOn(t, "sqlite")
	st := &retentionBacklogStore{Store: inner}
	e, err := New(Config{Store: st, NodeID: "retention-node", PollInterval: 50 * time.Millisecond, LeaderTTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	waitFor(t, "retention to start", func() bool { return st.calls.Load() >= 1 })
	id := reviewInsertDue(t, inner, "review.retention", 200*time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if reviewState(t, inner, id) == store.StatePending {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task due 200ms after insert still %s 2s later (poll interval 50ms): promotion waits behind retention (%d batches so far)",
		reviewState(t, inner, id), st.calls.Load())
}

// TestReviewSameNodeIDTwoLeaders: two live engines with one node id (the
// docs recommend a stable --node-id across restarts; an overlapping
// restart or a copied config gives two processes the same id) both
// "renew" the one lease row, since the row is keyed by node id only:
// both run the scheduler loops at once.
func TestReviewSameNodeIDTwoLeaders(t *testing.T) {
	st := newLeaderStore(t)
	a := startLeaderEngine(t, st, "same-id", time.Second, nil)
	waitFor(t, "a to lead", a.IsLeader)
	b := startLeaderEngine(t, st, "same-id", time.Second, nil)
	time.Sleep(time.Second)
	if a.IsLeader() && b.IsLeader() {
		t.Fatalf("two engines with node id %q both lead at once", "same-id")
	}
}
