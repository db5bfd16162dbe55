package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// leaseAnswer is what one long poll answered.
type leaseAnswer struct {
	tasks []store.Task
	err   error
}

// startLongPollsErr starts n long polls of one task each for types and
// returns the channel their answers, errors included, arrive on.
func startLongPollsErr(ctx context.Context, e *Engine, n int, types ...string) chan leaseAnswer {
	got := make(chan leaseAnswer, n)
	for i := range n {
		go func() {
			ts, err := e.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprintf("wake-%d", i), Types: types, Max: 1, Wait: 30 * time.Second})
			got <- leaseAnswer{ts, err}
		}()
	}
	return got
}

// isFetching reports w.fetching.
func (w *waiter) isFetching(b *broadcaster) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return w.fetching
}

// flakyFetches fails the next fail calls of FetchTasks and counts the
// calls.
type flakyFetches struct {
	store.Store
	fail atomic.Int64
	n    atomic.Int64
}

var errFetchInjected = errors.New("injected fetch failure")

func (s *flakyFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	defer s.n.Add(1)
	if s.fail.Add(-1) >= 0 {
		return nil, errFetchInjected
	}
	s.fail.Store(0)
	return s.Store.FetchTasks(ctx, p)
}

// TestFailedFetchHandsOnItsWakeUp: the waiter a new task woke fails its
// fetch and answers the error; another waiter of its group takes the task
// at once. The failed waiter had consumed the group's only wake-up, so the
// task waited for the others' poll interval.
func TestFailedFetchHandsOnItsWakeUp(t *testing.T) {
	st := &flakyFetches{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := startLongPollsErr(ctx, e, 3, "wake.err")
	waitLongPolls(t, e, 3)
	waitFor(t, "every long poll's first fetch", func() bool { return st.n.Load() >= 3 })

	st.fail.Store(1)
	id := mustEnqueue(t, e, "wake.err", `1`)
	failed := false
	timeout := time.After(10 * time.Second)
	for {
		select {
		case a := <-got:
			switch {
			case errors.Is(a.err, errFetchInjected) && !failed:
				failed = true
				continue
			case a.err != nil || len(a.tasks) != 1 || a.tasks[0].ID != id:
				t.Fatalf("a long poll answered %v, %v; want task %s", a.tasks, a.err, id)
			}
			if !failed {
				t.Fatal("a long poll got the task and none saw the injected failure")
			}
			return
		case <-timeout:
			t.Fatalf("no long poll got the task within 10s (the failed fetch answered: %v)", failed)
		}
	}
}

// unsyncedClockDatabase is a SQLite store whose database server's time
// cannot be read until the test allows it: the engine starts with its
// clock not synced.
type unsyncedClockDatabase struct {
	store.Store
	ok atomic.Bool
}

func (u *unsyncedClockDatabase) DatabaseNow(context.Context) (time.Time, error) {
	if !u.ok.Load() {
		return time.Time{}, errors.New("database time unavailable")
	}
	return time.Now().UTC().Round(time.Microsecond), nil
}

// TestLongPollFetchesWhenTheClockIsReady: a task enqueued while the node's
// clock is not synced wakes a waiting long poll that may not lease; once
// the clock is measured, the long poll takes the task at once, not at its
// next poll interval (nothing woke fetchers when the clock became ready).
func TestLongPollFetchesWhenTheClockIsReady(t *testing.T) {
	st := &unsyncedClockDatabase{Store: openWorkerStoreOn(t, "sqlite")}
	e := startWorkerEngine(t, st, Config{NodeID: "wake-clock", NoScheduler: true, ClockSync: ClockSyncOn, PollInterval: time.Minute})
	if e.clockReady() {
		t.Fatal("the clock is ready without a measurement")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := startLongPollsErr(ctx, e, 1, "wake.clock")
	waitLongPolls(t, e, 1)
	w := func() *waiter {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		if g := e.wake.groups["wake.clock"]; len(g) == 1 {
			return g[0]
		}
		return nil
	}
	waitFor(t, "the long poll to wait", func() bool { return w() != nil && !w().isFetching(e.wake) })
	id := mustEnqueue(t, e, "wake.clock", `1`)
	// The wake-up reaches the long poll, which finds the clock not ready.
	waitFor(t, "the long poll to take its wake-up", func() bool { return len(w().ch) == 0 && !w().isFetching(e.wake) })
	st.ok.Store(true)
	waitFor(t, "the clock to be measured", e.clockReady)
	select {
	case a := <-got:
		if a.err != nil || len(a.tasks) != 1 || a.tasks[0].ID != id {
			t.Fatalf("the long poll answered %v, %v; want task %s", a.tasks, a.err, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not get the task within 10s of the clock being ready")
	}
}

// gatedFetches holds every FetchTasks call, once gated, until the test
// releases the calls held so far: the test sees the rounds of fetches the
// wake-ups cause.
type gatedFetches struct {
	store.Store
	mu      sync.Mutex
	gated   bool
	held    int
	release chan struct{}
}

func (s *gatedFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	s.mu.Lock()
	if s.gated {
		s.held++
		ch := s.release
		s.mu.Unlock()
		<-ch
	} else {
		s.mu.Unlock()
	}
	return s.Store.FetchTasks(ctx, p)
}

func (s *gatedFetches) heldNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// releaseHeld lets the fetches held so far run.
func (s *gatedFetches) releaseHeld() {
	s.mu.Lock()
	close(s.release)
	s.release, s.held = make(chan struct{}), 0
	s.mu.Unlock()
}

// TestPassedWakeUpsDouble: waiters whose fetches leased tasks pass the
// wake-up to waiters that are not fetching already, so the fetches of a
// batch double each round (1, 2, 4, 8): a batch reaches n waiting long
// polls in about log2(n) rounds of store queries. A waiter passed the
// wake-up to the first others of its group, those fetching at the same
// time among them, and the rounds grew by one waiter each (1, 2, 2, 2...):
// 100 waiters took 50 rounds.
func TestPassedWakeUpsDouble(t *testing.T) {
	st := &gatedFetches{Store: openWorkerStoreOn(t, "sqlite"), release: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 16
	got := startLongPollsErr(ctx, e, waiters, "wake.double")
	waitLongPolls(t, e, waiters)
	waitFor(t, "every long poll to wait", func() bool {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		for _, w := range e.wake.groups["wake.double"] {
			if w.fetching {
				return false
			}
		}
		return true
	})
	st.mu.Lock()
	st.gated = true
	st.mu.Unlock()
	reqs := make([]EnqueueRequest, waiters-1)
	for i := range reqs {
		reqs[i] = EnqueueRequest{Type: "wake.double", Payload: json.RawMessage(`1`)}
	}
	if _, err := e.EnqueueMany(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 8; round *= 2 {
		waitFor(t, fmt.Sprintf("a round of %d fetches", round), func() bool { return st.heldNow() >= round })
		if n := st.heldNow(); n != round {
			t.Fatalf("a round of %d fetches, want %d", n, round)
		}
		st.releaseHeld()
	}
	for i := range waiters - 1 {
		select {
		case a := <-got:
			if a.err != nil || len(a.tasks) != 1 {
				t.Fatalf("a long poll answered %v, %v", a.tasks, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d long polls got a task within 10s", i, waiters-1)
		}
	}
}
