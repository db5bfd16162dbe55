package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestInsertNotifiesOnlyForInsertedTasks: an insert whose keyed tasks all
// turn out to be duplicates adds nothing a fetcher could take, so it sends
// no wake-up. It used to notify whenever the batch it was given held a
// task that would not start running, inserted or not: every node's
// fetchers woke and queried for nothing on each repeated key (a client
// retrying its requests, a producer re-sending a backlog).
func TestInsertNotifiesOnlyForInsertedTasks(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	l := connect(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := l.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		t.Fatal(err)
	}
	// wakeups returns how many wake-ups were delivered before the marker
	// the test sends now: notifications arrive in commit order.
	wakeups := func(marker string) int {
		t.Helper()
		if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, marker); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			msg, err := l.WaitForNotification(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", marker, err)
			}
			if msg.Payload == marker {
				return n
			}
			if msg.Payload == "" {
				n++
			}
		}
	}
	insert := func(tasks ...store.NewTask) []store.InsertResult {
		t.Helper()
		res, err := s.InsertTasks(ctx, store.InsertParams{Now: t0, Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	scheduled := store.NewTask{ID: "s1", Type: "x", IdempotencyKey: "ks", RunAt: t0.Add(time.Hour)}
	insert(store.NewTask{ID: "p1", Type: "x", IdempotencyKey: "kp"}, scheduled)
	if n := wakeups("first"); n != 1 {
		t.Fatalf("inserting new tasks sent %d wake-ups, want 1", n)
	}
	res := insert(store.NewTask{ID: "p2", Type: "x", IdempotencyKey: "kp"},
		store.NewTask{ID: "s2", Type: "x", IdempotencyKey: "ks", RunAt: t0.Add(time.Hour)})
	if !res[0].Duplicate || !res[1].Duplicate {
		t.Fatalf("repeated keys: %+v, want duplicates", res)
	}
	if n := wakeups("duplicates"); n != 0 {
		t.Errorf("an insert of duplicates only sent %d wake-ups, want 0", n)
	}
	insert(store.NewTask{ID: "p3", Type: "x", IdempotencyKey: "kp"}, store.NewTask{ID: "p4", Type: "x", IdempotencyKey: "new"})
	if n := wakeups("one new"); n != 1 {
		t.Errorf("an insert with one new task sent %d wake-ups, want 1", n)
	}
}
