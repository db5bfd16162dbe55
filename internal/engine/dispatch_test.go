package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestDirectDispatchTakesTheHighestPriorityFirst: when the enqueues of one
// commit are more than the idle handlers, the tasks leased at insert are
// those of the highest priority (then the earliest due), as a fetch would
// take them; the others wait pending. Before, they were taken in the order
// the enqueues queued, so a low-priority task enqueued a moment before a
// high-priority one ran first while the high one waited for its handler.
func TestDirectDispatchTakesTheHighestPriorityFirst(t *testing.T) {
	ls := openLockableStore(t, backendtest.SQLite)
	e := startWorkerEngine(t, ls.Store, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	var mu sync.Mutex
	var ran []string
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 1, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
		mu.Lock()
		ran = append(ran, string(tk.Payload))
		mu.Unlock()
		return nil
	}})
	waitFor(t, "the worker's first fetch", func() bool { return e.Counters().Fetches > 0 })

	unlock := ls.lock(t)
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()
	// Enqueues of a delayed task (leased to no one, waking no fetcher) wait
	// out the lock until one of them has to queue.
	var wg sync.WaitGroup
	defer wg.Wait()
	enqueue := func(r EnqueueRequest) {
		wg.Go(func() {
			if _, err := e.Enqueue(context.Background(), r); err != nil {
				t.Errorf("enqueue %s: %v", r.Payload, err)
			}
		})
	}
	for i := 0; ; i++ {
		enqueue(EnqueueRequest{Type: "later", Payload: json.RawMessage(fmt.Sprint(i)), Delay: time.Hour})
		if pollUntil(100*time.Millisecond, func() bool { return len(e.inserts.ch) > 0 }) {
			break
		}
		if i == 63 {
			t.Fatal("no enqueue queued while the write lock was held")
		}
	}
	queued := len(e.inserts.ch)
	low, high := 0, 10
	enqueue(EnqueueRequest{Type: "q", Payload: json.RawMessage(`"low"`), Priority: &low})
	if !pollUntil(10*time.Second, func() bool { return len(e.inserts.ch) >= queued+1 }) {
		t.Fatal("the low-priority enqueue did not queue")
	}
	enqueue(EnqueueRequest{Type: "q", Payload: json.RawMessage(`"high"`), Priority: &high})
	if !pollUntil(10*time.Second, func() bool { return len(e.inserts.ch) >= queued+2 }) {
		t.Fatal("the high-priority enqueue did not queue")
	}
	unlock()
	unlocked = true
	waitFor(t, "both tasks to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`"high"`, `"low"`}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v; want %v: one idle handler, and the high-priority task committed with the low one", ran, want)
	}
}

// TestDirectDispatchDoesNotOvertakeWorkAFullWorkerCouldNotFetch: a worker
// whose handlers were all busy could not fetch the tasks that became
// pending meanwhile; until its next fetch has taken them, an enqueue is
// not leased to it at insert (which would run the new task before older,
// higher-priority ones). Before, a worker kept the "drained" mark of its
// last fetch while it was full, so the first enqueue after a handler freed
// took the handler ahead of everything pending.
func TestDirectDispatchDoesNotOvertakeWorkAFullWorkerCouldNotFetch(t *testing.T) {
	ls := openLockableStore(t, backendtest.SQLite)
	e := startWorkerEngine(t, ls.Store, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	release := make(chan struct{})
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 1, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
		if string(tk.Payload) == `"first"` {
			<-release
		}
		return nil
	}})
	w := drainedLocalWorker(t, e, "q")
	low, high := 0, 10
	first, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "q", Payload: json.RawMessage(`"first"`), Priority: &low})
	if err != nil || first.Task.State != store.StateRunning {
		t.Fatalf("first task: %s, %v; want leased at insert to the idle worker", first.Task.State, err)
	}
	older, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "q", Payload: json.RawMessage(`"older"`), Priority: &high})
	if err != nil || older.Task.State != store.StatePending {
		t.Fatalf("older task: %s, %v; want pending behind the busy handler", older.Task.State, err)
	}
	// The handler frees while the database is locked: the worker's fetch
	// of the older task waits for the lock, and so does the next enqueue.
	unlock := ls.lock(t)
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()
	close(release)
	waitFor(t, "the handler to finish", func() bool { return w.inFlight.Load() == 0 })
	// The next enqueue's commit would lease its task here if a worker took
	// it; the older task is still pending, unfetched.
	now := e.now()
	picks := e.pickLocal([]store.NewTask{{ID: NewID(now), Type: "q", Payload: json.RawMessage(`"newer"`), RunAt: now}}, now)
	for _, p := range picks {
		p.w.unreserve()
	}
	if len(picks) != 0 {
		t.Fatalf("a newer task would be leased at insert while the older, higher-priority one waits pending")
	}
	unlock()
	unlocked = true
	waitTask(t, e, older.Task.ID, "the older task to run", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
}

// drainedLocalWorker waits for the first in-process worker of typ to have
// fetched and found its queue drained (open to direct dispatch), and
// returns it. The fetch is counted before the worker marks itself drained:
// it waits for the mark too.
func drainedLocalWorker(t *testing.T, e *Engine, typ string) *workerRun {
	t.Helper()
	waitFor(t, "the worker's first fetch", func() bool { return e.Counters().Fetches > 0 })
	w := func() *workerRun {
		e.locals.mu.Lock()
		defer e.locals.mu.Unlock()
		return e.locals.byType[typ][0]
	}()
	waitFor(t, "the worker to be drained", w.drained.Load)
	return w
}

// TestDirectDispatchRefusedByAFullWorkerHoldsItUntilItFetches: an enqueue
// that finds a worker's handlers all busy inserts its task pending, and
// the worker may not take a later enqueue at insert until a fetch of its
// own has taken that task, even when a handler frees before the worker
// acted on the task's wake-up. Before, only the worker's fetch loop
// cleared its "drained" mark when it found itself full, and a worker made
// full by direct dispatch was parked in its wait for a wake-up: a handler
// freed before the loop ran (a descheduled goroutine) let the next
// enqueue overtake the pending task (TestDirectDispatchDoesNotOvertakeWork
// AFullWorkerCouldNotFetch failed so about once a run under -race). The
// refused enqueue is the engine's own pickLocal, with no wake-up sent, as
// the loop not yet acting on it.
func TestDirectDispatchRefusedByAFullWorkerHoldsItUntilItFetches(t *testing.T) {
	st := openWorkerStoreOn(t, backendtest.SQLite)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	release := make(chan struct{})
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 1, Prefetch: -1, Handle: func(context.Context, *store.Task) error {
		<-release
		return nil
	}})
	w := drainedLocalWorker(t, e, "q")
	if first, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "q", Payload: json.RawMessage(`"first"`)}); err != nil || first.Task.State != store.StateRunning {
		t.Fatalf("first task: %s, %v; want leased at insert to the idle worker", first.Task.State, err)
	}
	offer := func(payload string) []dispatchPick { return offerLocal(e, "q", payload) }
	if picks := offer(`"older"`); len(picks) != 0 {
		t.Fatal("a task was leased at insert to a worker whose handler is busy")
	}
	close(release)
	waitFor(t, "the handler to finish", func() bool { return w.inFlight.Load() == 0 })
	if picks := offer(`"newer"`); len(picks) != 0 {
		t.Fatal("a newer task would be leased at insert ahead of the one the full worker refused, before the worker fetched")
	}
}

// offerLocal asks the engine's direct dispatch whether it would lease a new
// task of typ to a local worker at insert, as an enqueue's commit would,
// gives back any slot it reserved, and returns its picks. No wake-up is
// sent and nothing is inserted.
func offerLocal(e *Engine, typ, payload string) []dispatchPick {
	now := e.now()
	picks := e.pickLocal([]store.NewTask{{ID: NewID(now), Type: typ, Payload: json.RawMessage(payload), RunAt: now}}, now)
	for _, p := range picks {
		p.w.unreserve()
	}
	return picks
}
