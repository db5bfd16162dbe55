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

func taskStateOf(t *testing.T, st store.Store, id string) store.State {
	t.Helper()
	got, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return got.State
}

// TestStuckSchedulerCallDoesNotStallLeadership: one scheduler statement
// hangs (a silently dropped connection: it ends only when its context
// does) while the lease renewals, on other connections, keep succeeding.
// Each scheduler store call is bounded (schedCallCtx), so the due task is
// promoted. Before, the leader kept the lease with its loops stuck: nothing
// was promoted or reaped anywhere, and no standby could take over.
func TestStuckSchedulerCallDoesNotStallLeadership(t *testing.T) {
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
	// Promoted within a few TTLs; the deadline is generous for a loaded
	// machine (stuck loops never promote it at all).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := taskStateOf(t, st, id)
		if s == store.StatePending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: task due 100ms after insert is %s; leader %q leads %v (its loops stuck in one statement), standby leads %v; want it promoted",
				s, e.NodeID(), e.IsLeader(), standby.IsLeader())
		}
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

// TestRetentionBacklogDoesNotStarvePromotion: with a retention backlog
// (each batch here takes 100 ms), a task due 200 ms after the first pass
// is promoted on time: retention runs one batch per pass. Before, a run of
// up to 100 batches held promotion and reaping back until it ended (10 s
// here): the 5 s allowed leave a loaded machine room and still catch that.
func TestRetentionBacklogDoesNotStarvePromotion(t *testing.T) {
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
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if taskStateOf(t, inner, id) == store.StatePending {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task due 200ms after insert still %s 5s later (poll interval 50ms): promotion waits behind retention (%d batches so far)",
		taskStateOf(t, inner, id), st.calls.Load())
}

// TestWatchdogClearsLeaderRole: a renewal overruns its deadline (SQLite
// runs a claimed write to its end whatever the caller's context, and a
// write lock held by another connection keeps it waiting). The watchdog
// cancels the loops at the lease's safe end and the node stops calling
// itself leader then (IsLeader, the registry), not when the renewal
// returns.
func TestWatchdogClearsLeaderRole(t *testing.T) {
	const ttl = time.Second // safe end 750 ms after a renewal starts
	st := newLeaderStore(t)
	release := make(chan struct{})
	// The renewal that hangs is the first call made while the node leads
	// and once its loops ran, not the second call: on a loaded machine the
	// first one can be cut off by its bound (TTL/4), and the node that
	// never led then hung in an attempt; or the loops can start late.
	// A call finding the node leading is a renewal: the role is set and
	// cleared (but by the watchdog) by the goroutine making the calls.
	var node atomic.Pointer[Engine]
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if e := node.Load(); e != nil && e.IsLeader() && len(st.loopInstances()) > 0 {
			<-release // ignores ctx, like a claimed SQLite write
			return store.Lease{}, context.DeadlineExceeded
		}
		return st.Store.AcquireLeader(ctx, p)
	}
	defer close(release)
	e := startLeaderEngine(t, st, "overrun", ttl, nil)
	node.Store(e)
	waitFor(t, "the loops to start", func() bool { return len(st.loopInstances()) >= 1 })
	waitFor(t, "the watchdog to cancel the loops", func() bool { return st.loopInstances()[0].Err() != nil })
	// The registry is written by the node's own loop once told of the
	// change: polled, not given a fixed second, which a loaded machine can
	// overrun. The renewal stays blocked until the test ends, so a role
	// cleared only when it returns still fails.
	role := func() string {
		ns, _ := st.ListNodes(context.Background(), time.Time{})
		for _, n := range ns {
			if n.ID == "overrun" {
				return n.Role
			}
		}
		return ""
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.IsLeader() || role() == RoleLeader {
		if time.Now().After(deadline) {
			t.Fatalf("loops cancelled by the watchdog 10s ago, yet IsLeader = %v and registry role = %q", e.IsLeader(), role())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
