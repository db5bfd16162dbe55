package engine

import (
	"context"
	"testing"
	"time"
)

// TestOneTaskLeasePassesNoWakeUp: a long poll of one task woken for one
// new task, which its fetch leases, passes the wake-up to no other
// waiter: the wake-up was for that task alone. It passed it to two, and
// each queried the store for nothing. The pass happens before Lease
// answers, so once the answer is in, a waiter it woke is fetching, or
// holds the wake-up, or has queried the store.
func TestOneTaskLeasePassesNoWakeUp(t *testing.T) {
	st := &countingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 8
	got := startLongPolls(ctx, e, waiters, "one.task")
	waitLongPolls(t, e, waiters)
	idle := func() bool {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		for _, w := range e.wake.groups["one.task"] {
			if w.fetching || len(w.ch) > 0 {
				return false
			}
		}
		return true
	}
	waitFor(t, "every long poll to wait", idle)
	before := st.n.Load()
	id := mustEnqueue(t, e, "one.task", `1`)
	select {
	case ts := <-got:
		if len(ts) != 1 || ts[0].ID != id {
			t.Fatalf("a long poll answered %v, want task %s", ts, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no long poll got the task within 10s")
	}
	if n := st.n.Load() - before; n != 1 || !idle() {
		t.Fatalf("one task leased by a long poll of one task: %d store queries (want 1), other waiters woken: %v", n, !idle())
	}
}

// TestWakeUpForOneTaskMerged: a wake-up for one task that meets another
// wake-up a waiter holds is not for one task any more, nor is one handed
// on after a failed fetch; one handed on by a waiter that leaves is.
func TestWakeUpForOneTaskMerged(t *testing.T) {
	b := newBroadcaster()
	w := b.joinGroup("k")
	b.setFetching(w, false)
	b.broadcastOne("k")
	<-w.ch
	if !b.took(w) {
		t.Fatal("a wake-up for one task taken alone is not for one task")
	}
	b.setFetching(w, false)
	b.broadcastOne("k")
	b.broadcastOne("k")
	<-w.ch
	if b.took(w) {
		t.Fatal("two wake-ups merged are for one task")
	}
	b.setFetching(w, false)
	b.broadcastOne("k")
	<-w.ch
	b.requeue(w)
	<-w.ch
	if b.took(w) {
		t.Fatal("a wake-up handed back after a failed fetch is for one task")
	}
	other := b.joinGroup("k")
	b.setFetching(other, false)
	b.setFetching(w, false)
	b.broadcastOne("k") // to w, the longest waiting
	b.leaveGroup("k", w)
	<-other.ch
	if !b.took(other) {
		t.Fatal("a wake-up for one task handed on by a waiter that left is not for one task")
	}
}
