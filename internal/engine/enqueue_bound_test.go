package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
)

// TestEnqueueCommitBoundedWhileDatabaseHangs: an operator's session holds
// an exclusive lock on the tasks table, so every insert waits. An Enqueue
// whose caller never gives up (context.Background) must still come back,
// with an error, once the insert commit's bound (the lease duration) has
// passed, and the insert loop must be free for the next enqueue once the
// lock is gone. Before the bound, the Enqueue waited for as long as the
// lock was held: the batch runs detached from its callers' contexts.
func TestEnqueueCommitBoundedWhileDatabaseHangs(t *testing.T) {
	url := pgtest.URL(t)
	st := openPG(t, url)
	e, err := New(Config{Store: st, NodeID: "n", Version: "test", LeaseDuration: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	if _, err := e.Enqueue(ctx, EnqueueRequest{Type: "a"}); err != nil {
		t.Fatalf("first enqueue: %v", err)
	}

	lockCtx, cancelLock := context.WithTimeout(ctx, time.Minute)
	defer cancelLock()
	conn, err := pgx.Connect(lockCtx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(lockCtx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(lockCtx, "LOCK TABLE tasks IN EXCLUSIVE MODE"); err != nil {
		t.Fatalf("lock: %v", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "a"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("enqueue succeeded while the tasks table was locked")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("enqueue failed with %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = tx.Rollback(context.Background())
		<-done
		t.Fatal("enqueue still waiting 15 s into the table lock (the insert commit has no bound)")
	}
	if err := tx.Rollback(lockCtx); err != nil {
		t.Fatalf("unlock: %v", err)
	}

	// The insert loop is free again.
	deadline := time.Now().Add(15 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.Enqueue(tctx, EnqueueRequest{Type: "a"})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("enqueue after the lock was released: %v", err)
		}
	}
}
