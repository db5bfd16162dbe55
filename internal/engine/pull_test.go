package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// fetchThenCancel is a store whose FetchTasks cancels the caller's request
// once the fetch has committed: the client of a long poll hung up just as
// its tasks were leased.
type fetchThenCancel struct {
	store.Store
	cancel context.CancelFunc
}

func (s *fetchThenCancel) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if len(ts) > 0 {
		s.cancel()
	}
	return ts, err
}

// TestLeaseReleasesTasksOfAGoneCaller: tasks leased for a pull request
// whose caller is gone are put back to pending at once, their attempts not
// counted, instead of staying leased until the lease expires and then
// costing an attempt.
func TestLeaseReleasesTasksOfAGoneCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fetchThenCancel{Store: openWorkerStoreOn(t, "sqlite"), cancel: cancel}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	id := mustEnqueue(t, e, "pull.gone", `1`)
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.gone"}, Max: 1, LeaseDuration: time.Hour})
	if err == nil || len(ts) != 0 {
		t.Fatalf("Lease for a gone caller = %d tasks, %v; want none and an error", len(ts), err)
	}
	tk := waitTask(t, e, id, "released", func(tk store.Task) bool { return tk.State == store.StatePending })
	if tk.Attempt != 0 || tk.LeaseID != "" {
		t.Fatalf("released task: attempt %d, lease %q; want attempt 0 and no lease", tk.Attempt, tk.LeaseID)
	}
	// The next worker gets it as a first attempt.
	ts, err = e.Lease(context.Background(), LeaseRequest{WorkerID: "py2", Types: []string{"pull.gone"}, Max: 1})
	if err != nil || len(ts) != 1 || ts[0].Attempt != 1 {
		t.Fatalf("second lease: %v, %v", ts, err)
	}
}

// TestLeaseDefaultCappedByMaxLease: without lease_seconds, a pull lease
// takes the longest timeout of the types asked for, but at most
// MaxLeaseDuration, like an explicit one.
func TestLeaseDefaultCappedByMaxLease(t *testing.T) {
	ctx := context.Background()
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	spec, err := e.TypeSpec(ctx, "pull.long")
	if err != nil {
		t.Fatal(err)
	}
	spec.Timeout = 24 * time.Hour
	if _, err := e.PutType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, e, "pull.long", `1`)
	before := time.Now()
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.long"}, Max: 1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v, %v", ts, err)
	}
	if got := ts[0].LeaseExpiresAt.Sub(before); got > MaxLeaseDuration+time.Minute || got < MaxLeaseDuration-time.Minute {
		t.Fatalf("default lease of a type with a 24h timeout runs %v, want about %v", got, MaxLeaseDuration)
	}
}

// TestEndLongPolls: EndLongPolls answers a waiting long poll at once, with
// no tasks, and later long polls do not wait.
func TestEndLongPolls(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	done := make(chan error, 1)
	go func() {
		ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"idle"}, Max: 1, Wait: 30 * time.Second})
		if err == nil && len(ts) != 0 {
			t.Errorf("long poll got %d tasks", len(ts))
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for e.LongPolls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never started waiting")
		}
		time.Sleep(time.Millisecond)
	}
	e.EndLongPolls()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll still waiting 5s after EndLongPolls")
	}
	start := time.Now()
	if _, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"idle"}, Max: 1, Wait: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a long poll after EndLongPolls waited %v", took)
	}
	if n := e.LongPolls(); n != 0 {
		t.Fatalf("LongPolls = %d after both returned", n)
	}
}

// TestHeartbeatWithoutDurationKeepsTheLease: a heartbeat without
// lease_seconds extends a lease by the default a lease of the task's type
// gets (the type's timeout, five minutes here), and never shortens the
// lease. It used to set every such lease to 30 s from now, so a worker that
// leased for the type's timeout and heartbeated every minute lost its task.
func TestHeartbeatWithoutDurationKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	spec, err := e.TypeSpec(ctx, "pull.hb")
	if err != nil {
		t.Fatal(err)
	}
	spec.Timeout = 5 * time.Minute
	if _, err := e.PutType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, e, "pull.hb", `1`)
	mustEnqueue(t, e, "other", `1`)

	// A lease of the configured type, then a heartbeat without a duration.
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.hb"}, Max: 1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v, %v", ts, err)
	}
	before := time.Now()
	exp, err := e.Heartbeat(ctx, LeaseToken(&ts[0]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := exp.Sub(before); got < 5*time.Minute-time.Second {
		t.Fatalf("bodiless heartbeat of a type with a 5m timeout extended the lease by %v, want 5m", got)
	}

	// A lease taken for an hour is not cut short by a bodiless heartbeat.
	ts, err = e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"other"}, Max: 1, LeaseDuration: time.Hour})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v, %v", ts, err)
	}
	exp, err = e.Heartbeat(ctx, LeaseToken(&ts[0]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(ts[0].LeaseExpiresAt) {
		t.Fatalf("bodiless heartbeat moved an hour-long lease from %v to %v", ts[0].LeaseExpiresAt, exp)
	}
	if got, err := e.Get(ctx, ts[0].ID); err != nil || !got.LeaseExpiresAt.Equal(exp) {
		t.Fatalf("stored expiry %v, %v; heartbeat answered %v", got.LeaseExpiresAt, err, exp)
	}
	// An explicit duration still sets the lease exactly, shorter or not.
	before = time.Now()
	exp, err = e.Heartbeat(ctx, LeaseToken(&ts[0]), 10*time.Second)
	if err != nil || exp.Sub(before) > 11*time.Second {
		t.Fatalf("heartbeat of 10s: %v, %v", exp, err)
	}
}

// stoppedClock reads a time set by the test.
type stoppedClock struct{ at atomic.Pointer[time.Time] }

func (c *stoppedClock) Now() time.Time  { return *c.at.Load() }
func (c *stoppedClock) set(t time.Time) { c.at.Store(&t) }

// TestCompleteAtTheExpiryInstant: a lease is current up to and including
// its expiry instant, in the store and so for complete and fail. The
// engine's own check used to refuse a complete at that instant, while a
// heartbeat at the same instant succeeded.
func TestCompleteAtTheExpiryInstant(t *testing.T) {
	ctx := context.Background()
	clk := &stoppedClock{}
	clk.set(time.Now().Truncate(time.Microsecond))
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true, Clock: clk})
	mustEnqueue(t, e, "pull.edge", `1`)
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.edge"}, Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v, %v", ts, err)
	}
	clk.set(ts[0].LeaseExpiresAt)
	if err := e.Complete(ctx, ts[0].ID, LeaseToken(&ts[0])); err != nil {
		t.Fatalf("complete at the lease's expiry instant: %v", err)
	}
	if got, err := e.Get(ctx, ts[0].ID); err != nil || got.State != store.StateSucceeded {
		t.Fatalf("task after complete: %s, %v", got.State, err)
	}
}

// fetchThenShutdown is a store whose FetchTasks begins the engine's
// shutdown once the fetch has committed: a pull lease (no wait) was in
// flight as the server began to drain.
type fetchThenShutdown struct {
	store.Store
	e atomic.Pointer[Engine]
}

func (s *fetchThenShutdown) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if e := s.e.Load(); len(ts) > 0 && e != nil {
		e.BeginShutdown()
	}
	return ts, err
}

// TestLeaseHandsOutNothingOnceShutdownBegan: a pull lease whose fetch
// commits after the node began to shut down gives its tasks back (pending,
// attempt not counted) and answers none, and a lease asked for later
// leases nothing. The worker would get tasks it could report to nobody
// once the drain ends (on one node), so each waited for the reaper and
// cost an attempt.
func TestLeaseHandsOutNothingOnceShutdownBegan(t *testing.T) {
	st := &fetchThenShutdown{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	st.e.Store(e)
	id := mustEnqueue(t, e, "pull.drain", `1`)
	ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"pull.drain"}, Max: 1, LeaseDuration: time.Hour})
	if err != nil || len(ts) != 0 {
		t.Fatalf("Lease committed as shutdown began = %d tasks, %v; want none and no error", len(ts), err)
	}
	tk := waitTask(t, e, id, "released", func(tk store.Task) bool { return tk.State == store.StatePending })
	if tk.Attempt != 0 || tk.LeaseID != "" {
		t.Fatalf("released task: attempt %d, lease %q; want attempt 0 and no lease", tk.Attempt, tk.LeaseID)
	}
	ts, err = e.Lease(context.Background(), LeaseRequest{WorkerID: "py2", Types: []string{"pull.drain"}, Max: 1})
	if err != nil || len(ts) != 0 {
		t.Fatalf("Lease after shutdown began = %d tasks, %v; want none and no error", len(ts), err)
	}
	if tk, err := e.Get(context.Background(), id); err != nil || tk.State != store.StatePending || tk.Attempt != 0 {
		t.Fatalf("task after a lease during shutdown: %+v, %v; want pending, attempt 0", tk, err)
	}
}

// TestPullAnswersCarryTheStoredTimes: the lease expiry a heartbeat answers
// and the due time a failure report answers are the times the store keeps
// (microseconds), so a worker that compares them with what it reads later
// sees one time, not two that differ below the microsecond. They used to
// carry the nanoseconds of the engine's clock.
func TestPullAnswersCarryTheStoredTimes(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		clock := &stoppedClock{}
		clock.set(time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC))
		e := startWorkerEngine(t, openWorkerStoreOn(t, backend), Config{NoScheduler: true, Clock: clock})
		mustEnqueue(t, e, "pull.times", `1`)
		ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.times"}, Max: 1})
		if err != nil || len(ts) != 1 {
			t.Fatalf("lease: %v, %v", ts, err)
		}
		token := LeaseToken(&ts[0])
		exp, err := e.Heartbeat(ctx, token, 10*time.Second+789)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, e, ts[0].ID); !got.LeaseExpiresAt.Equal(exp) {
			t.Fatalf("heartbeat answered expiry %v, the store keeps %v", exp, got.LeaseExpiresAt)
		}
		out, err := e.Fail(ctx, ts[0].ID, token, ReportedError{Code: "x", Message: "boom", RetryAfter: time.Second + 789})
		if err != nil {
			t.Fatal(err)
		}
		if out.State != store.StateRetryWaiting {
			t.Fatalf("fail: state %s, want retry_waiting", out.State)
		}
		if got := mustGet(t, e, ts[0].ID); !got.RunAt.Equal(out.RunAt) {
			t.Fatalf("fail answered due time %v, the store keeps %v", out.RunAt, got.RunAt)
		}
	})
}
