package engine

import (
	"context"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
)

// TestInsertedCounterSkipsDuplicates: Counters.Inserted counts the tasks
// enqueues inserted; an enqueue whose idempotency key names an existing
// task inserts nothing. It used to count every enqueue of the commit.
func TestInsertedCounterSkipsDuplicates(t *testing.T) {
	backendtest.Run(t, testInsertedCounterSkipsDuplicates)
}

func testInsertedCounterSkipsDuplicates(t *testing.T, backend string) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, backend), Config{NoScheduler: true})
	ctx := context.Background()
	before := e.Counters().Inserted
	for i := range 3 {
		res, err := e.Enqueue(ctx, EnqueueRequest{Type: "a", IdempotencyKey: "order-42"})
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		if res.Duplicate != (i > 0) {
			t.Fatalf("enqueue %d: duplicate %v", i, res.Duplicate)
		}
	}
	if got := e.Counters().Inserted - before; got != 1 {
		t.Fatalf("Inserted grew by %d for one task and two duplicates, want 1", got)
	}
}
