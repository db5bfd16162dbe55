package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// When the scheduler loops start (on election), their first pass (promote
// due tasks, reap expired leases) must run at once. A poke queued before
// the loops started (here: a task enqueued with a one-hour delay) must not
// push that first pass back to the poked time: runScheduler treats next ==
// zero as "no timer set" although the timer is armed for 0, and resets it to
// the poked time whenever the select takes the poke before the timer (in
// practice on every start here; the rounds only make it certain).
func TestSchedulerFirstPassNotDelayedByPoke(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 8; round++ {
		st := openWorkerStoreOn(t, "sqlite")
		now := time.Now()
		// A task that becomes due 50 ms from now, inserted without a poke
		// (as by another process, or before this node started).
		res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{
			ID: NewID(now), Type: "sched.t", Payload: []byte("null"), RunAt: now.Add(50 * time.Millisecond)}}})
		if err != nil {
			t.Fatal(err)
		}
		id := res[0].Task.ID
		e, err := New(Config{Store: st, NodeID: "sched-test", PollInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// A delayed task enqueued on this node before its scheduler runs.
		if _, err := e.EnqueueMany(ctx, []EnqueueRequest{{Type: "sched.t", Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		var got store.Task
		for time.Now().Before(deadline) {
			got, err = st.GetTask(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == store.StatePending {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = e.Close()
		if got.State != store.StatePending {
			t.Fatalf("round %d: task due 50ms after start is still %s after 3s (poll interval 100ms): the scheduler's first pass was pushed back to the one-hour poke", round, got.State)
		}
	}
}

// TestReapedOutcomesAreCounted: the reaper's decisions are counted like a
// worker's: a reaped task retried counts in Retried, one dead-lettered in
// Dead (and both in Reaped). The reaper records its outcomes itself, and
// they used to show only in Reaped, so Client.Counters under-reported
// retries and dead letters whenever workers crashed.
func TestReapedOutcomesAreCounted(t *testing.T) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, "sqlite")
	now := time.Now()
	var nts []store.NewTask
	for i, max := range []int{1, 3} { // dead at once / retried
		nts = append(nts, store.NewTask{ID: NewID(now.Add(time.Duration(i))), Type: "reap.t", Payload: []byte("null"), RunAt: now, MaxAttempts: max})
	}
	res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: nts})
	if err != nil {
		t.Fatal(err)
	}
	// A worker of another process leases both, then dies.
	leased, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"reap.t"}, Limit: 2, WorkerID: "gone", LeaseDuration: 20 * time.Millisecond, Now: now})
	if err != nil || len(leased) != 2 {
		t.Fatalf("fetch: %d tasks, %v", len(leased), err)
	}
	e, err := New(Config{Store: st, NodeID: "reap-test", PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	deadline := time.Now().Add(10 * time.Second)
	for e.Counters().Reaped < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %d of 2 expired leases in 10 s", e.Counters().Reaped)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dead, err := st.GetTask(ctx, res[0].Task.ID)
	if err != nil || dead.State != store.StateDead {
		t.Fatalf("task with one attempt: %s, %v; want dead", dead.State, err)
	}
	c := e.Counters()
	if c.Dead != 1 || c.Retried != 1 {
		t.Fatalf("counters after reaping one task to the DLQ and one to a retry: Dead %d, Retried %d; want 1 and 1", c.Dead, c.Retried)
	}
}
