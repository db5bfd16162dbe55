package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestEnqueueRefusesRunTimesOutsideTheStoredRange: the engine itself
// refuses a run time outside years 1 to 9999 (in UTC) as an ErrInvalid
// naming run_at, with the task's index in a batch, whichever entry point
// the request came through; the store would refuse it only as a whole
// batch, naming no field. The extremes inside the range are taken.
func TestEnqueueRefusesRunTimesOutsideTheStoredRange(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	ctx := context.Background()
	for _, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -3600)), // year 10000 in UTC
		time.Date(0, 12, 31, 23, 0, 0, 0, time.UTC),
	} {
		_, err := e.Enqueue(ctx, EnqueueRequest{Type: "a", RunAt: at})
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "run_at" {
			t.Errorf("Enqueue at %s = %v, want a FieldError on run_at", at, err)
		}
		_, err = e.EnqueueMany(ctx, []EnqueueRequest{{Type: "a"}, {Type: "a", RunAt: at}})
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "tasks[1].run_at" {
			t.Errorf("EnqueueMany at %s = %v, want a FieldError on tasks[1].run_at", at, err)
		}
	}
	for _, at := range []time.Time{
		time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		if _, err := e.Enqueue(ctx, EnqueueRequest{Type: "a", RunAt: at}); err != nil {
			t.Errorf("Enqueue at %s: %v", at, err)
		}
	}
	if _, err := e.Enqueue(ctx, EnqueueRequest{Type: "a", Payload: []byte("\"\xff\"")}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "payload") {
		t.Errorf("Enqueue of a payload that is not UTF-8 = %v, want ErrInvalid naming payload", err)
	}
}
