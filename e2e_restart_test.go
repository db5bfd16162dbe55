package retryq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestRestartLosesNothing puts tasks in every state, stops everything
// (including a worker that never reports back), reopens the database and
// checks every task is still there, then lets the work finish.
func TestRestartLosesNothing(t *testing.T) { backendtest.Run(t, testRestartLosesNothing) }

func testRestartLosesNothing(t *testing.T, backend string) {
	open := backendtest.Database(t, backend, "")
	ctx := context.Background()
	st := open()
	e := newEnvOn(t, st, retryq.Options{NodeID: "node-a", DefaultPolicy: fastPolicy(2), LeaseDuration: 500 * time.Millisecond})
	ids := map[store.State]string{}
	enq := func(typ string, opts ...retryq.EnqueueOption) string {
		r, err := e.client.Enqueue(ctx, typ, map[string]string{"k": typ}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r.Task.ID
	}
	ids[store.StateScheduled] = enq("later", retryq.WithDelay(3*time.Second))
	ids[store.StatePending] = enq("idle")
	ids[store.StateCancelled] = enq("idle")
	if _, err := e.client.Cancel(ctx, ids[store.StateCancelled]); err != nil {
		t.Fatal(err)
	}
	ids[store.StateSucceeded] = enq("ok")
	ids[store.StateDead] = enq("poison")
	ids[store.StateRetryWaiting] = enq("flaky")
	ids[store.StateRunning] = enq("stuck")
	started := make(chan struct{}, 1)
	e.mux.HandleFunc("ok", func(ctx context.Context, t *retryq.Task) error { return nil })
	e.mux.HandleFunc("poison", func(ctx context.Context, t *retryq.Task) error {
		return retryq.Permanent(errors.New("bad input"))
	})
	e.mux.HandleFunc("flaky", func(ctx context.Context, t *retryq.Task) error {
		return retryq.RetryAfter(errors.New("429"), 300*time.Millisecond)
	})
	e.mux.HandleFunc("stuck", func(ctx context.Context, t *retryq.Task) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	e.startWorker(retryq.WorkerConfig{ShutdownGrace: 50 * time.Millisecond})
	e.waitState(ids[store.StateSucceeded], 10*time.Second, store.StateSucceeded)
	e.waitState(ids[store.StateDead], 10*time.Second, store.StateDead)
	e.waitState(ids[store.StateRetryWaiting], 10*time.Second, store.StateRetryWaiting)
	<-started
	// Simulate a crash: the database is closed under the running worker,
	// whose lease then can never be completed or released.
	before := map[string]retryq.TaskInfo{}
	for _, id := range ids {
		ti, err := e.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = ti
	}
	if before[ids[store.StateRunning]].State != store.StateRunning || before[ids[store.StateScheduled]].State != store.StateScheduled {
		t.Fatalf("setup: running=%s scheduled=%s", before[ids[store.StateRunning]].State, before[ids[store.StateScheduled]].State)
	}
	_ = st.Close()
	e.stop()

	// Restart on the same database.
	st2 := open()
	e2 := newEnvOn(t, st2, retryq.Options{NodeID: "node-a", DefaultPolicy: fastPolicy(2), LeaseDuration: 500 * time.Millisecond})
	for state, id := range ids {
		ti, err := e2.client.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s task lost across restart: %v", state, err)
		}
		b := before[id]
		if string(ti.Payload) != string(b.Payload) || ti.Type != b.Type || ti.CreatedAt != b.CreatedAt {
			t.Fatalf("%s task changed across restart: %+v vs %+v", state, ti, b)
		}
		if state.Terminal() && ti.State != state {
			t.Fatalf("%s task is %s after restart", state, ti.State)
		}
	}
	hist, _ := e2.client.Attempts(ctx, ids[store.StateDead])
	if len(hist) != 1 {
		t.Fatalf("dead task history %d attempts after restart", len(hist))
	}
	// Let everything finish: the stuck task's lease expires and is reaped.
	e2.mux.HandleFunc("later", func(ctx context.Context, t *retryq.Task) error { return nil })
	e2.mux.HandleFunc("idle", func(ctx context.Context, t *retryq.Task) error { return nil })
	e2.mux.HandleFunc("flaky", func(ctx context.Context, t *retryq.Task) error { return nil })
	e2.mux.HandleFunc("stuck", func(ctx context.Context, t *retryq.Task) error { return nil })
	e2.startWorker(retryq.WorkerConfig{})
	for _, s := range []store.State{store.StateScheduled, store.StatePending, store.StateRetryWaiting, store.StateRunning} {
		e2.waitState(ids[s], 15*time.Second, store.StateSucceeded)
	}
	h, _ := e2.client.Attempts(ctx, ids[store.StateRunning])
	if len(h) != 2 || h[0].Outcome != store.OutcomeLeaseExpired {
		t.Fatalf("stuck task history = %+v; want a lease_expired attempt then success", h)
	}
}
