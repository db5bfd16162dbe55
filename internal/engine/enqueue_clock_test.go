package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// backwardClock goes back a millisecond at every reading, as a clock
// corrected by a new, smaller offset (or a fake one stepped back) does.
type backwardClock struct {
	start time.Time
	n     atomic.Int64
}

func (c *backwardClock) Now() time.Time {
	return c.start.Add(-time.Duration(c.n.Add(1)) * time.Millisecond)
}

// TestEnqueueWithoutRunTimeIsDueWhenClockGoesBack: a task enqueued without
// a delay or run time is due at once, even when the clock reads earlier at
// the insert than when the request was checked. It was given the check's
// time as its run time, which the insert's earlier now then found in the
// future: the task started scheduled, waiting for the scheduler, and no
// idle local handler could take it at insert.
func TestEnqueueWithoutRunTimeIsDueWhenClockGoesBack(t *testing.T) {
	clk := &backwardClock{start: time.Now()}
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true, Clock: clk})
	ctx := context.Background()
	res, err := e.Enqueue(ctx, EnqueueRequest{Type: "a"})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if res.Task.State != store.StatePending {
		t.Errorf("Enqueue: state %s, want pending", res.Task.State)
	}
	many, err := e.EnqueueMany(ctx, []EnqueueRequest{{Type: "a"}, {Type: "a", Delay: time.Hour}})
	if err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	if many[0].Task.State != store.StatePending || many[1].Task.State != store.StateScheduled {
		t.Errorf("EnqueueMany: states %s and %s, want pending and scheduled", many[0].Task.State, many[1].Task.State)
	}
}
