package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
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
	// Every long poll joined its group, too: LongPolls counts one a
	// moment before it joins, and one that joined late would fetch once
	// the count below began.
	joined := func() bool {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		return len(e.wake.groups["one.task"]) == waiters
	}
	waitFor(t, "every long poll to wait", func() bool { return joined() && idle() })
	before := st.n.Load()
	leaseOneEnqueued(t, e, got, "one.task")
	if n := st.n.Load() - before; n != 1 || !idle() {
		t.Fatalf("one task leased by a long poll of one task: %d store queries (want 1), other waiters woken: %v", n, !idle())
	}
}

// TestOneTaskWakeUpLeasingAnotherTaskPassesOn: a long poll woken for one
// new task whose fetch leases another one (a higher-priority task another
// process made pending, with no wake-up here) passes the wake-up on, so
// the task it was woken for goes to another waiting long poll at once,
// not at the poll interval.
func TestOneTaskWakeUpLeasingAnotherTaskPassesOn(t *testing.T) {
	st := &countingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 2
	got := startLongPolls(ctx, e, waiters, "one.other")
	waitLongPolls(t, e, waiters)
	now := e.now()
	other := NewID(now)
	if _, err := st.InsertTasks(context.Background(), store.InsertParams{Now: now, Tasks: []store.NewTask{
		{ID: other, Type: "one.other", Payload: json.RawMessage(`"other"`), Priority: 10},
	}}); err != nil {
		t.Fatal(err)
	}
	id := mustEnqueue(t, e, "one.other", `"new"`)
	leased := map[string]bool{}
	for range waiters {
		select {
		case ts := <-got:
			for _, tk := range ts {
				leased[tk.ID] = true
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("leased %v within 10s; want both %s (woken for) and %s (pending without a wake-up)", leased, id, other)
		}
	}
	if !leased[id] || !leased[other] {
		t.Fatalf("leased %v; want %s and %s", leased, id, other)
	}
}

// TestWakeUpForOneTaskMerged: a wake-up for one task that meets another
// wake-up a waiter holds is not for one task any more, nor is one handed
// on after a failed fetch; one handed on by a waiter that leaves is.
func TestWakeUpForOneTaskMerged(t *testing.T) {
	b := newBroadcaster()
	w := b.joinGroup("k")
	b.setFetching(w, false)
	b.broadcastOne("k", "t1")
	<-w.ch
	if got := b.took(w); got != "t1" {
		t.Fatal("a wake-up for one task taken alone is not for one task")
	}
	b.setFetching(w, false)
	b.broadcastOne("k", "t1")
	b.broadcastOne("k", "t1")
	<-w.ch
	if got := b.took(w); got != "" {
		t.Fatal("two wake-ups merged are for one task")
	}
	b.setFetching(w, false)
	b.broadcastOne("k", "t1")
	<-w.ch
	b.requeue(w)
	<-w.ch
	if got := b.took(w); got != "" {
		t.Fatal("a wake-up handed back after a failed fetch is for one task")
	}
	other := b.joinGroup("k")
	b.setFetching(other, false)
	b.setFetching(w, false)
	b.broadcastOne("k", "t1") // to w, the longest waiting
	b.leaveGroup("k", w)
	<-other.ch
	if got := b.took(other); got != "t1" {
		t.Fatal("a wake-up for one task handed on by a waiter that left is not for one task")
	}
}
