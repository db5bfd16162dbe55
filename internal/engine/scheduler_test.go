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
