package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestTookWakeCountsTheTasksNamedAndNotHeld: when every wake-up merged
// in a plain subscriber's since it last took one was for one task alone,
// tookWake counts those tasks the subscriber does not hold (0: the
// wake-up is stale); a wake-up for any number of tasks, for more tasks
// than it remembers, or one that came in after the subscriber took its
// own makes it -1 (not known). Each take starts afresh.
func TestTookWakeCountsTheTasksNamedAndNotHeld(t *testing.T) {
	held := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	b := newBroadcaster()
	ch := b.subscribe("q")
	take := func(holds func(string) bool) int {
		t.Helper()
		select {
		case <-ch:
		default:
			t.Fatal("no wake-up to take")
		}
		return b.tookWake(ch, holds)
	}

	b.broadcastOne("q", "a")
	b.broadcastOne("q", "b")
	if n := take(held("a", "b", "c")); n != 0 {
		t.Errorf("wake-ups for tasks a and b, both held: %d, want 0 (stale)", n)
	}
	b.broadcastOne("q", "a")
	b.broadcastOne("q", "x")
	b.broadcastOne("q", "y")
	if n := take(held("a", "b")); n != 2 {
		t.Errorf("wake-ups for a (held), x and y: %d, want 2", n)
	}
	b.broadcastOne("q", "a")
	if n := take(held("a")); n != 0 {
		t.Errorf("after a take, a wake-up for a held task alone: %d, want 0: the take did not start afresh", n)
	}
	b.broadcastOne("q", "a")
	b.broadcastTypes([]string{"q"})
	if n := take(held("a")); n != -1 {
		t.Errorf("a wake-up merged with one for any number of tasks: %d, want -1", n)
	}
	b.broadcastOne("q", "a")
	b.broadcast()
	if n := take(held("a")); n != -1 {
		t.Errorf("a wake-up merged with an untyped one: %d, want -1", n)
	}
	var ids []string
	for i := range maxWakeIDs + 1 {
		ids = append(ids, fmt.Sprint("t", i))
		b.broadcastOne("q", ids[i])
	}
	if n := take(held(ids...)); n != -1 {
		t.Errorf("wake-ups for %d tasks, more than the %d remembered: %d, want -1", len(ids), maxWakeIDs, n)
	}
	// A wake-up that comes in between the receive and tookWake.
	b.broadcastOne("q", "a")
	<-ch
	b.broadcastOne("q", "a")
	if n := b.tookWake(ch, held("a")); n != -1 {
		t.Errorf("a take with another wake-up come in since the receive: %d, want -1", n)
	}
	if n := take(held("a")); n != 0 {
		t.Errorf("the later wake-up, for a held task alone: %d, want 0", n)
	}
	if n := b.tookWake(make(chan struct{}, 1), held("a")); n != -1 {
		t.Errorf("a channel that is no subscriber's: %d, want -1", n)
	}
}

// TestWorkerIgnoresTheWakeUpOfTasksItsFetchLeased: the wake-up sent for a
// task made due by a commit that the worker's fetch shared or followed,
// and that reaches the worker after that fetch leased the task, does not
// make the worker fetch again: it stays open to direct dispatch, and the
// next enqueue is leased to it at insert. Before, it fetched for nothing,
// and an enqueue meanwhile went pending and woke it for another fetch:
// on SQLite, in a stream of single enqueues, nine tasks in ten went
// through fetches that way (6,200-7,000 tasks/s against 8,200-9,900).
func TestWorkerIgnoresTheWakeUpOfTasksItsFetchLeased(t *testing.T) {
	st := openWorkerStoreOn(t, backendtest.SQLite)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	ran := make(chan string, 4)
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 2, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
		ran <- string(tk.Payload)
		return nil
	}})
	w := drainedLocalWorker(t, e, "q")
	sub := func() chan struct{} {
		e.wake.mu.Lock()
		defer e.wake.mu.Unlock()
		for ch, st := range e.wake.subs {
			if slices.Equal(st.types, []string{"q"}) {
				return ch
			}
		}
		t.Fatal("the worker has no wake-up subscription")
		return nil
	}()

	// A task made due by a commit of its own; the worker fetches it on an
	// untyped wake-up, before the one-task wake-up of its commit comes.
	ctx := context.Background()
	now := e.now()
	id := NewID(now)
	if _, err := st.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{{ID: id, Type: "q", Payload: json.RawMessage(`"fetched"`), RunAt: now}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		select {
		case p := <-ran:
			if p != want {
				t.Fatalf("ran %s, want %s", p, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not run", want)
		}
	}
	e.wake.broadcast()
	next(`"fetched"`)
	waitFor(t, "the worker to be drained after its fetch", w.drained.Load)
	fetches := e.Counters().Fetches

	e.wake.broadcastOne("q", id)
	waitFor(t, "the worker to take the late wake-up", func() bool { return len(sub) == 0 })
	res, err := e.Enqueue(ctx, EnqueueRequest{Type: "q", Payload: json.RawMessage(`"next"`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != store.StateRunning {
		t.Errorf("the next enqueue was %s, want leased at insert to the idle worker", res.Task.State)
	}
	if n := e.Counters().Fetches; n != fetches {
		t.Errorf("the worker fetched %d times more for a wake-up of the task its fetch had leased", n-fetches)
	}
	next(`"next"`)
}

// TestWorkerWokenForNamedTasksStaysOpenWhileItFetches: a drained worker
// woken only by wake-ups that each named their one task fetches one more
// than those, with handlers set aside for them, and stays open to direct
// dispatch meanwhile: an enqueue while that fetch is in flight is leased
// at insert. Before, it went pending and waited for the next fetch (on
// SQLite the worker then kept fetching a third of a stream of single
// enqueues). Woken by a wake-up for any number of tasks, the worker still
// holds direct dispatch while it fetches. A fetch that comes back full
// (more was pending than named) leaves nothing behind, and the handlers
// set aside are all given back.
func TestWorkerWokenForNamedTasksStaysOpenWhileItFetches(t *testing.T) {
	st := &gatedFetches{Store: openWorkerStoreOn(t, backendtest.SQLite), release: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute, LeaseDuration: time.Minute})
	ran := make(chan string, 16)
	hold := make(chan struct{}) // closed to let the "fill" tasks end
	runWorker(t, e, WorkerConfig{Types: []string{"q"}, Concurrency: 8, Prefetch: -1, Handle: func(_ context.Context, tk *store.Task) error {
		ran <- string(tk.Payload)
		if strings.HasPrefix(string(tk.Payload), `"fill`) {
			<-hold
		}
		return nil
	}})
	w := drainedLocalWorker(t, e, "q")
	ctx := context.Background()
	// insert makes tasks pending with no wake-up of their own.
	insert := func(payloads ...string) []string {
		t.Helper()
		now := e.now()
		var nts []store.NewTask
		for _, p := range payloads {
			nts = append(nts, store.NewTask{ID: NewID(now), Type: "q", Payload: json.RawMessage(p), RunAt: now})
		}
		res, err := st.InsertTasks(ctx, store.InsertParams{Tasks: nts, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(res))
		for i := range res {
			ids[i] = res[i].Task.ID
		}
		return ids
	}
	gate := func() {
		st.mu.Lock()
		st.gated = true
		st.mu.Unlock()
	}
	ungate := func() {
		st.mu.Lock()
		st.gated = false
		st.mu.Unlock()
		st.releaseHeld()
	}
	t.Cleanup(ungate) // before the worker stops (cleanups run last first)
	waitRan := func(want ...string) {
		t.Helper()
		var got []string
		deadline := time.After(30 * time.Second)
		for len(got) < len(want) {
			select {
			case p := <-ran:
				got = append(got, p)
			case <-deadline:
				t.Fatalf("ran %v, want %v (the poll is a minute away)", got, want)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	enqueue := func(payload string) store.State {
		t.Helper()
		res, err := e.Enqueue(ctx, EnqueueRequest{Type: "q", Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Task.State
	}
	settled := func() {
		t.Helper()
		waitFor(t, "every handler to be free and the worker drained", func() bool { return w.inFlight.Load() == 0 && w.drained.Load() })
	}

	// Woken for one named task: open while the fetch is held.
	gate()
	e.wake.broadcastOne("q", insert(`"named"`)[0])
	waitFor(t, "the worker's fetch for the named task", func() bool { return st.heldNow() == 1 })
	if s := enqueue(`"during"`); s != store.StateRunning {
		t.Errorf("an enqueue while the fetch for a named task was in flight was %s, want leased at insert", s)
	}
	ungate()
	waitRan(`"named"`, `"during"`)
	settled()

	// Woken for any number of tasks: closed while the fetch is held.
	gate()
	insert(`"any"`)
	e.wake.broadcast()
	waitFor(t, "the worker's fetch for an untyped wake-up", func() bool { return st.heldNow() == 1 })
	if s := enqueue(`"during any"`); s != store.StatePending {
		t.Errorf("an enqueue while a fetch for any tasks was in flight was %s, want pending", s)
	}
	ungate()
	waitRan(`"any"`, `"during any"`)
	settled()

	// Woken for one named task with three more pending unnamed: the fetch
	// of two comes back full, and the worker fetches the rest at once.
	insert(`"silent 1"`, `"silent 2"`, `"silent 3"`)
	e.wake.broadcastOne("q", insert(`"named 2"`)[0])
	waitRan(`"silent 1"`, `"silent 2"`, `"silent 3"`, `"named 2"`)
	settled()

	// An enqueue refused while the open fetch is in flight (the handlers
	// set aside and those taken at insert fill the worker) leaves it
	// closed after the fetch, until a fetch of its own. The refusal is the
	// engine's own pickLocal, with no wake-up sent: the loop not yet
	// acting on it.
	offer := func(payload string) []dispatchPick { return offerLocal(e, "q", payload) }
	gate()
	e.wake.broadcastOne("q", insert(`"named 3"`)[0])
	waitFor(t, "the worker's fetch for the third named task", func() bool { return st.heldNow() == 1 })
	var taken int
	for taken = 0; taken < w.cfg.Concurrency; taken++ {
		if s := enqueue(fmt.Sprintf(`"fill %d"`, taken)); s != store.StateRunning {
			t.Fatalf("enqueue %d while the open fetch was in flight was %s, want leased at insert", taken, s)
		}
		if w.inFlight.Load() >= int64(w.cfg.Concurrency) {
			taken++
			break
		}
	}
	if picks := offer(`"refused"`); len(picks) != 0 {
		t.Fatal("a task was leased at insert to a worker whose handlers were all taken or set aside")
	}
	ungate()
	want := []string{`"named 3"`}
	for i := range taken {
		want = append(want, fmt.Sprintf(`"fill %d"`, i))
	}
	waitRan(want...)
	close(hold)
	waitFor(t, "every handler to be free", func() bool { return w.inFlight.Load() == 0 })
	if picks := offer(`"newer"`); len(picks) != 0 {
		t.Fatal("after the open fetch, a newer task would be leased at insert ahead of the one the full worker refused, before the worker fetched")
	}
}
