package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// leaseN enqueues n tasks of typ and leases them for an hour as one pull
// worker.
func leaseN(t *testing.T, e *Engine, typ string, n int) []store.Task {
	t.Helper()
	for range n {
		mustEnqueue(t, e, typ, `1`)
	}
	ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{typ}, Max: n, LeaseDuration: time.Hour})
	if err != nil || len(ts) != n {
		t.Fatalf("lease %d %s: %d tasks, %v", n, typ, len(ts), err)
	}
	return ts
}

// awaitAsync runs AwaitPullReports under ctx and returns the channel of its
// result.
func awaitAsync(ctx context.Context, e *Engine) <-chan int {
	got := make(chan int, 1)
	go func() { got <- e.AwaitPullReports(ctx) }()
	return got
}

// TestAwaitPullReportsEndsWithTheLastReport: a stopping node waits for the
// reports of the pull leases it handed out, and no longer: a completed,
// a failed and a released lease (its answer never reached the worker)
// leave the count, and the wait ends as the last one is reported, long
// before its bound.
func TestAwaitPullReportsEndsWithTheLastReport(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	if n := e.AwaitPullReports(context.Background()); n != 0 {
		t.Fatalf("AwaitPullReports with no lease out = %d", n)
	}
	ts := leaseN(t, e, "pull.await", 3)
	if n := e.PullLeasesOut(); n != 3 {
		t.Fatalf("PullLeasesOut after leasing 3 = %d", n)
	}
	e.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := awaitAsync(ctx, e)
	if err := e.Complete(ctx, ts[0].ID, LeaseToken(&ts[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Fail(ctx, ts[1].ID, LeaseToken(&ts[1]), ReportedError{Message: "boom"}); err != nil {
		t.Fatal(err)
	}
	if n := e.PullLeasesOut(); n != 1 {
		t.Fatalf("PullLeasesOut after two reports = %d, want 1", n)
	}
	select {
	case n := <-got:
		t.Fatalf("AwaitPullReports returned %d with a lease still out", n)
	default:
	}
	start := time.Now()
	e.ReleaseLeased(ts[2:])
	select {
	case n := <-got:
		if n != 0 {
			t.Errorf("AwaitPullReports = %d after the last lease was given back, want 0", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitPullReports still waits after every lease was reported")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("AwaitPullReports took %v to see the last report", took)
	}
}

// TestAwaitPullReportsForgetsLeasesTheStoreNoLongerHolds: a lease ended
// elsewhere (here the task was cancelled in the store, as through another
// node) is not waited for, and a lease nobody reports holds the wait only
// until its context ends, which then says how many are still out.
func TestAwaitPullReportsForgetsLeasesTheStoreNoLongerHolds(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	ts := leaseN(t, e, "pull.gone.elsewhere", 2)
	if _, err := e.st.CancelTask(context.Background(), store.CancelParams{ID: ts[0].ID, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n := e.AwaitPullReports(ctx); n != 1 {
		t.Errorf("AwaitPullReports with one lease cancelled and one never reported = %d, want 1", n)
	}
	if ctx.Err() == nil {
		t.Error("AwaitPullReports returned before its context ended with a lease out")
	}
	if _, err := e.st.CancelTask(context.Background(), store.CancelParams{ID: ts[1].ID, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	if n := e.AwaitPullReports(context.Background()); n != 0 {
		t.Errorf("AwaitPullReports once both tasks were cancelled = %d, want 0", n)
	}
}

// TestPullLeasesOutForgetsLostLeases: a report refused as lost forgets the
// lease, as a successful one does.
func TestPullLeasesOutForgetsLostLeases(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	ts := leaseN(t, e, "pull.lost.report", 1)
	if _, err := e.st.CancelTask(context.Background(), store.CancelParams{ID: ts[0].ID, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.Complete(context.Background(), ts[0].ID, LeaseToken(&ts[0])); err == nil {
		t.Fatal("Complete of a cancelled task's lease succeeded")
	}
	if n := e.PullLeasesOut(); n != 0 {
		t.Errorf("PullLeasesOut after a report refused as lost = %d, want 0", n)
	}
}

// TestPullLeasesOutLeavesOutExpiredLeases: a lease past its last known
// expiry is not out (as PullLeasesOut says): its worker is gone, or
// reports through another node. A stopping node whose pull workers died
// waited for them: PullLeasesOut counted each until the next lease's
// pruning, up to a minute later, and AwaitPullReports checked them in the
// store a hundred per half second (some 1.5 s for 250). The engine's clock
// is stepped past the leases' expiry: with real one-second leases, leasing
// the 250 took over a second on a loaded machine and the first of them
// expired before they were counted.
func TestPullLeasesOutLeavesOutExpiredLeases(t *testing.T) {
	st := &countingGets{Store: openWorkerStoreOn(t, "sqlite")}
	clk := new(steppedClock)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, Clock: clk, ClockSync: ClockSyncOff})
	const n = 250
	for range n {
		mustEnqueue(t, e, "pull.expired", `1`)
	}
	var last time.Time
	for left := n; left > 0; left -= MaxLeaseBatch {
		k := min(left, MaxLeaseBatch)
		ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "dead", Types: []string{"pull.expired"}, Max: k, LeaseDuration: time.Minute})
		if err != nil || len(ts) != k {
			t.Fatalf("lease %d: %d tasks, %v", k, len(ts), err)
		}
		last = ts[len(ts)-1].LeaseExpiresAt
	}
	if out := e.PullLeasesOut(); out != n {
		t.Fatalf("PullLeasesOut with %d leases out = %d", n, out)
	}
	clk.step.Store(int64(2 * time.Minute))
	if !e.now().After(last) {
		t.Fatalf("engine time %s after the step, want past the last lease's expiry %s", e.now(), last)
	}
	if out := e.PullLeasesOut(); out != 0 {
		t.Errorf("PullLeasesOut once every lease expired = %d, want 0", out)
	}
	before := st.n.Load()
	if left := e.AwaitPullReports(context.Background()); left != 0 {
		t.Errorf("AwaitPullReports with only expired leases = %d, want 0", left)
	}
	if asked := st.n.Load() - before; asked != 0 {
		t.Errorf("AwaitPullReports asked the store about %d leases expired already, want none", asked)
	}
}

// countingGets is a store that counts its GetTask calls.
type countingGets struct {
	store.Store
	n atomic.Int64
}

func (s *countingGets) GetTask(ctx context.Context, id string) (store.Task, error) {
	s.n.Add(1)
	return s.Store.GetTask(ctx, id)
}

// failingGets is a store whose GetTask answers ErrUnavailable while down,
// as while the database is away.
type failingGets struct {
	store.Store
	down atomic.Bool
}

func (s *failingGets) GetTask(ctx context.Context, id string) (store.Task, error) {
	if s.down.Load() {
		return store.Task{}, fmt.Errorf("get task: connection refused: %w", store.ErrUnavailable)
	}
	return s.Store.GetTask(ctx, id)
}

// TestAwaitPullReportsEndsWhileTheStoreIsUnavailable: a stop while the
// database is away does not wait for reports that cannot commit: the
// wait ends at the first round whose every check found the store
// unavailable, saying why, with the leases still out counted. It waited
// its whole bound (10 s in retryq server).
func TestAwaitPullReportsEndsWhileTheStoreIsUnavailable(t *testing.T) {
	var logs logBuffer
	st := &failingGets{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	leaseN(t, e, "pull.db.away", 2)
	st.down.Store(true)
	e.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if n := e.AwaitPullReports(ctx); n != 2 {
		t.Errorf("AwaitPullReports with the store unavailable = %d, want the 2 leases out", n)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("AwaitPullReports took %s with the store unavailable", took)
	}
	if out := logs.String(); !strings.Contains(out, "database is unavailable") {
		t.Errorf("no line says the wait ended for the unavailable database:\n%s", out)
	}
}
