package engine

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// fetchesByType counts the store's FetchTasks calls by the types fetched.
type fetchesByType struct {
	store.Store
	mu sync.Mutex
	n  map[string]int
}

func (s *fetchesByType) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	s.mu.Lock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[typeSetKey(p.Types)]++
	s.mu.Unlock()
	return s.Store.FetchTasks(ctx, p)
}

func (s *fetchesByType) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

// TestEnqueueWakesOnlyTheLongPollsOfItsType: with long polls waiting on
// many distinct types (one per tenant, say), a task of one type makes only
// the long polls that name it query the store: an enqueue used to wake
// one waiter of every group, each of which queried the store for types
// nobody had enqueued (2,000 types: 2,000 fetches per task).
func TestEnqueueWakesOnlyTheLongPollsOfItsType(t *testing.T) {
	st := &fetchesByType{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	checkOnlyItsGroupWakes(t, e, e, st, 30, "")
}

// checkOnlyItsGroupWakes starts one long poll on poller for each of the
// types tenant.0 to tenant.<groups-1>, waits until each has fetched and
// the fetch counts of st (poller's store) have held still for 100 ms,
// enqueues a task of tenant.7 on enqueuer, and checks that the tenant.7
// long poll answers it and that no other long poll queries the store in
// the next 300 ms. where says where the task came from, for the message.
func checkOnlyItsGroupWakes(t *testing.T, enqueuer, poller *Engine, st *fetchesByType, groups int, where string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make([]chan []store.Task, groups)
	for i := range groups {
		answers[i] = startLongPolls(ctx, poller, 1, fmt.Sprintf("tenant.%d", i))
	}
	waitLongPolls(t, poller, groups)
	snapshot := func() []int {
		n := make([]int, groups)
		for i := range groups {
			n[i] = st.count(fmt.Sprintf("tenant.%d", i))
		}
		return n
	}
	waitFor(t, "every long poll's first fetch", func() bool { return !slices.Contains(snapshot(), 0) })
	// A listener's first connection wakes every fetcher once: count from
	// when the counts have held still for 100 ms.
	before := snapshot()
	for still, deadline := time.Now(), time.Now().Add(10*time.Second); time.Since(still) < 100*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("the long polls kept fetching for 10 s with nothing enqueued")
		}
		time.Sleep(5 * time.Millisecond)
		if now := snapshot(); !slices.Equal(now, before) {
			before, still = now, time.Now()
		}
	}
	id := mustEnqueue(t, enqueuer, "tenant.7", `1`)
	if ts := recvWithin(t, answers[7], 10*time.Second, "the tenant.7 long poll to answer"); len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("the tenant.7 long poll answered %v, want task %s", ts, id)
	}
	// Woken long polls query within milliseconds of the wake-up.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		for i, n := range snapshot() {
			if i != 7 && n > before[i] {
				t.Fatalf("a task of tenant.7%s made the long poll of tenant.%d query the store %d times", where, i, n-before[i])
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTypedBroadcastWakesOnlyThoseOfItsTypes: a wake-up naming types
// reaches the plain subscribers that serve one of them or every type, and
// one waiter of each group whose set holds one of them; an untyped one
// reaches all.
func TestTypedBroadcastWakesOnlyThoseOfItsTypes(t *testing.T) {
	b := newBroadcaster()
	all := b.subscribe()
	a := b.subscribe("a")
	bc := b.subscribe("b", "c")
	ga := b.joinGroup(typeSetKey([]string{"a"}))
	gab := b.joinGroup(typeSetKey([]string{"x", "a"}))
	gb := b.joinGroup(typeSetKey([]string{"b", "ab"}))
	for _, w := range []*waiter{ga, gab, gb} {
		b.setFetching(w, false)
	}
	b.broadcastTypes([]string{"a"})
	for name, got := range map[string]bool{"all": len(all) == 1, "a": len(a) == 1, "group a": len(ga.ch) == 1, "group a,x": len(gab.ch) == 1} {
		if !got {
			t.Errorf("a wake-up of type a did not reach the subscriber %s", name)
		}
	}
	if len(bc) != 0 || len(gb.ch) != 0 {
		t.Errorf("a wake-up of type a reached b,c (%d) or the group ab,b (%d)", len(bc), len(gb.ch))
	}
	<-all
	b.broadcast()
	if len(all) != 1 || len(bc) != 1 || len(gb.ch) != 1 {
		t.Errorf("an untyped wake-up did not reach every subscriber: all %d, b,c %d, group ab,b %d", len(all), len(bc), len(gb.ch))
	}
}

// TestPushForgetsTheSlotsOfTypesNoLongerPushed: the delivery counts of a
// type whose push target was removed go once none of its deliveries is in
// flight; a node kept one per type that ever had a target, for as long as
// it ran (types come and go with tenants and webhooks).
func TestPushForgetsTheSlotsOfTypesNoLongerPushed(t *testing.T) {
	srv := target(t, func(http.ResponseWriter, *http.Request) {})
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true})
	ctx := context.Background()
	const types = 20
	for i := range types {
		if _, err := e.PutType(ctx, TypeSpec{Type: fmt.Sprintf("slots.%d", i), Target: &Target{URL: srv.URL}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the pusher to read every target", func() bool {
		for i := range types {
			if !pushFetching(e, fmt.Sprintf("slots.%d", i)) {
				return false
			}
		}
		return true
	})
	for i := range types {
		if _, err := e.PutType(ctx, TypeSpec{Type: fmt.Sprintf("slots.%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the pusher to drop every target", func() bool {
		for i := range types {
			if pushFetching(e, fmt.Sprintf("slots.%d", i)) {
				return false
			}
		}
		return true
	})
	waitFor(t, "the pusher to forget the slots of the types without a target", func() bool {
		e.push.mu.Lock()
		defer e.push.mu.Unlock()
		return len(e.push.slots) == 0
	})
}
