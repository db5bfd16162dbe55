package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestPullReportAfterLeaseExpiredIsCounted: a pull worker's completion or
// failure presented after its lease expired is refused and counted in
// LeaseLost, as an in-process handler's late outcome is. Before, only a
// report that passed the engine's own check and was then refused by the
// store was counted; one the check refused (the usual case) was not.
func TestPullReportAfterLeaseExpiredIsCounted(t *testing.T) {
	ctx := context.Background()
	clk := &stoppedClock{}
	clk.set(time.Now().Truncate(time.Microsecond))
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true, Clock: clk})
	mustEnqueue(t, e, "pull.late", `1`)
	mustEnqueue(t, e, "pull.late", `2`)
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.late"}, Max: 2, LeaseDuration: time.Minute})
	if err != nil || len(ts) != 2 {
		t.Fatalf("lease: %v, %v", ts, err)
	}
	clk.set(ts[0].LeaseExpiresAt.Add(time.Microsecond))
	before := e.Counters().LeaseLost
	if err := e.Complete(ctx, ts[0].ID, LeaseToken(&ts[0])); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("complete after the lease expired: %v, want %v", err, store.ErrLeaseLost)
	}
	if _, err := e.Fail(ctx, ts[1].ID, LeaseToken(&ts[1]), ReportedError{Message: "late"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("fail after the lease expired: %v, want %v", err, store.ErrLeaseLost)
	}
	if got := e.Counters().LeaseLost - before; got != 2 {
		t.Errorf("LeaseLost grew by %d, want 2 (a refused completion and a refused failure)", got)
	}
}
