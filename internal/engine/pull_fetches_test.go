package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestLongPollWithNothingDueFetchesOnce: a one-task long poll shorter
// than the poll interval, with nothing due and no wake-up, queries the
// store once, when it starts. It queried again as its wait ended, just
// before answering: the worker's next request, sent at once, queries
// anyway.
func TestLongPollWithNothingDueFetchesOnce(t *testing.T) {
	st := &countingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	for _, wait := range []time.Duration{time.Millisecond, 200 * time.Millisecond} {
		before := st.n.Load()
		ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "w", Types: []string{"idle"}, Max: 1, Wait: wait})
		if err != nil || len(ts) != 0 {
			t.Fatalf("wait %s: lease answered %v, %v; want no task", wait, ts, err)
		}
		if n := st.n.Load() - before; n != 1 {
			t.Fatalf("a long poll of %s with nothing due fetched %d times, want 1", wait, n)
		}
	}
}

// TestShortPullFetchPassesNoWakeUp: a long poll whose fetch leased fewer
// tasks than it asked for took every task due: it wakes no other waiter
// of its group, whose fetches would find nothing. It woke two, so one
// task enqueued cost three fetches.
func TestShortPullFetchPassesNoWakeUp(t *testing.T) {
	st := &countingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 3
	got := make(chan []store.Task, waiters)
	for i := range waiters {
		go func() {
			ts, _ := e.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprintf("short-%d", i), Types: []string{"short"}, Max: 10, Wait: 30 * time.Second})
			got <- ts
		}()
	}
	waitLongPolls(t, e, waiters)
	waitFor(t, "every long poll to wait", func() bool {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		g := e.wake.groups["short"]
		for _, w := range g {
			if w.fetching {
				return false
			}
		}
		return len(g) == waiters
	})
	before := st.n.Load()
	id := mustEnqueue(t, e, "short", `1`)
	if ts := recvWithin(t, got, 10*time.Second, "a long poll to answer"); len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("a long poll answered %v, want task %s", ts, id)
	}
	// Passed wake-ups are taken within milliseconds.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := st.n.Load() - before; n > 1 {
			t.Fatalf("one task taken by a fetch of up to 10 made %d fetches, want 1", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
