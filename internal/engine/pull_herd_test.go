package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// countingFetches counts the store's FetchTasks calls.
type countingFetches struct {
	store.Store
	n atomic.Int64
}

func (s *countingFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	s.n.Add(1)
	return s.Store.FetchTasks(ctx, p)
}

// startLongPolls starts n long polls of one task each for types and
// returns the channel their answers arrive on. They end with ctx.
func startLongPolls(ctx context.Context, e *Engine, n int, types ...string) chan []store.Task {
	got := make(chan []store.Task, n)
	for i := range n {
		go func() {
			ts, _ := e.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprintf("herd-%d", i), Types: types, Max: 1, Wait: 30 * time.Second})
			got <- ts
		}()
	}
	return got
}

// TestOneTaskWakesOneLongPoll: with many pull requests waiting for the
// same types, a new task makes a few of them query the store, not all:
// each query but one would find nothing (a thundering herd, one store
// query per waiting worker per enqueue).
func TestOneTaskWakesOneLongPoll(t *testing.T) {
	st := &countingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	// Long polls fetch again every PollInterval without a wake-up: a
	// minute keeps those out of the count.
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 40
	got := startLongPolls(ctx, e, waiters, "herd")
	waitLongPolls(t, e, waiters)
	waitFor(t, "every long poll's first fetch", func() bool { return st.n.Load() >= waiters })

	before := st.n.Load()
	leaseOneEnqueued(t, e, got, "herd")
	// The herd, if any, queries within milliseconds of the wake-up.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := st.n.Load() - before; n > 4 {
			t.Fatalf("one task made %d of %d waiting long polls query the store", n, waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBatchReachesEveryLongPoll: a batch of as many tasks as there are
// waiting long polls reaches all of them through the wake-ups they pass on,
// long before a long poll would fetch again by itself; so does one task of
// another set of types.
func TestBatchReachesEveryLongPoll(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 24
	got := startLongPolls(ctx, e, waiters, "herd.a", "herd.b")
	other := startLongPolls(ctx, e, 3, "herd.c")
	waitLongPolls(t, e, waiters+3)

	reqs := make([]EnqueueRequest, waiters)
	for i := range reqs {
		reqs[i] = EnqueueRequest{Type: []string{"herd.b", "herd.a"}[i%2], Payload: json.RawMessage(`1`)}
	}
	if _, err := e.EnqueueMany(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, e, "herd.c", `1`)
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < waiters {
		select {
		case ts := <-got:
			if len(ts) != 1 || seen[ts[0].ID] {
				t.Fatalf("a long poll answered %v (tasks seen so far: %d)", ts, len(seen))
			}
			seen[ts[0].ID] = true
		case <-timeout:
			t.Fatalf("%d of %d long polls got a task within 10s", len(seen), waiters)
		}
	}
	select {
	case ts := <-other:
		if len(ts) != 1 || ts[0].Type != "herd.c" {
			t.Fatalf("the herd.c long poll answered %v", ts)
		}
	case <-timeout:
		t.Fatal("no herd.c long poll got its task within 10s")
	}
}

// TestGroupWakeUpIsHandedOn: a broadcast wakes the first waiter of each
// group and every plain subscriber; a waiter leaving with a wake-up it did
// not take hands it to the next; pass wakes the given number of others.
func TestGroupWakeUpIsHandedOn(t *testing.T) {
	b := newBroadcaster()
	plain := b.subscribe()
	var w []*waiter
	for range 4 {
		w = append(w, b.joinGroup("k"))
		b.setFetching(w[len(w)-1], false) // waiting
	}
	other := b.joinGroup(typeSetKey([]string{"y", "x", "y"}))
	woken := func(w *waiter) bool {
		select {
		case <-w.ch:
			return true
		default:
			return false
		}
	}
	b.broadcast()
	if !woken(&waiter{ch: plain}) || !woken(other) {
		t.Fatal("a broadcast did not wake a plain subscriber or the other group's waiter")
	}
	if b.groups[typeSetKey([]string{"x", "y"})] == nil {
		t.Fatal("types given in another order, with a repeat, are another group")
	}
	b.leaveGroup("k", w[0]) // leaves without taking its wake-up
	if woken(w[0]) || !woken(w[1]) || woken(w[2]) || woken(w[3]) {
		t.Fatal("the wake-up of a waiter that left did not go to the next waiter alone")
	}
	b.pass("k", w[1], 2)
	if woken(w[1]) || !woken(w[2]) || !woken(w[3]) {
		t.Fatal("pass did not wake the two other waiters")
	}
	b.leaveGroup("k", w[1])
	b.leaveGroup("k", w[2])
	b.leaveGroup("k", w[3])
	if _, ok := b.groups["k"]; ok {
		t.Fatal("an empty group is kept")
	}
}

// TestPassReachesAFetchingWaiterWhenNoOtherIsIdle: a wake-up passed on
// prefers waiters that are not fetching, but when too few are, it goes to
// ones that are: their fetch may have begun before the tasks it is for
// were committed, and they would then wait for the poll interval with
// tasks due.
func TestPassReachesAFetchingWaiterWhenNoOtherIsIdle(t *testing.T) {
	b := newBroadcaster()
	passer, busy, idle := b.joinGroup("k"), b.joinGroup("k"), b.joinGroup("k")
	b.setFetching(idle, false)
	held := func(w *waiter) bool { return len(w.ch) > 0 }
	b.pass("k", passer, 1)
	if !held(idle) || held(busy) || held(passer) {
		t.Fatal("one wake-up passed on did not go to the idle waiter alone")
	}
	<-idle.ch
	b.setFetching(idle, true)
	b.pass("k", passer, 2)
	if !held(busy) || !held(idle) || held(passer) {
		t.Fatal("with no idle waiter left, wake-ups passed on did not reach the fetching ones")
	}
}

// leaseOneEnqueued enqueues one task of typ and waits (10 s at most) for
// one of the long polls answering on got to lease exactly it.
func leaseOneEnqueued(t *testing.T, e *Engine, got chan []store.Task, typ string) {
	t.Helper()
	id := mustEnqueue(t, e, typ, `1`)
	select {
	case ts := <-got:
		if len(ts) != 1 || ts[0].ID != id {
			t.Fatalf("a long poll answered %v, want task %s", ts, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no long poll got the task within 10s")
	}
}
