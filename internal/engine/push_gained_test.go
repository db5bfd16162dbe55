package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// pushFetching reports whether e's pusher has a fetcher for typ: it has
// read the type's target.
func pushFetching(e *Engine, typ string) bool {
	e.push.mu.Lock()
	defer e.push.mu.Unlock()
	return e.push.fetchers[typ] != nil
}

// TestWorkerLeavesATypeThatGainsAPushTarget: a push target set while an
// in-process worker runs (here by another node: straight into the store,
// which this node reads again within about 5 s) makes the worker stop
// fetching the type, and enqueues stop handing its tasks to the worker:
// the engine delivers them. The worker goes on with its other types, and
// takes the type back when the target is removed. The worker went on
// fetching the type (and took its new tasks at enqueue when idle), in
// competition with the push deliveries.
func TestWorkerLeavesATypeThatGainsAPushTarget(t *testing.T) {
	backendtest.Run(t, testWorkerLeavesATypeThatGainsAPushTarget)
}

func testWorkerLeavesATypeThatGainsAPushTarget(t *testing.T, backend string) {
	var mu sync.Mutex
	delivered := map[string]bool{}
	srv := target(t, func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		delivered[r.Header.Get(HeaderTaskID)] = true
		mu.Unlock()
	})
	st := openWorkerStoreOn(t, backend)
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	ran := make(chan string, 64)
	runWorker(t, e, WorkerConfig{Types: []string{"gain.push", "gain.other"}, Concurrency: 2, Handle: func(_ context.Context, tk *store.Task) error {
		ran <- tk.ID
		return nil
	}})
	ctx := context.Background()
	if id := mustEnqueue(t, e, "gain.push", `0`); recvWithin(t, ran, 10*time.Second, "the handler") != id {
		t.Fatal("the handler ran another task")
	}

	tg, err := json.Marshal(Target{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutType(ctx, store.TypeConfig{Type: "gain.push", Target: tg}, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pusher to read the target", func() bool { return pushFetching(e, "gain.push") })
	var ids []string
	for range 5 {
		ids = append(ids, mustEnqueue(t, e, "gain.push", `1`))
	}
	for _, id := range ids {
		waitTask(t, e, id, "the pushed task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	}
	select {
	case id := <-ran:
		t.Fatalf("the in-process handler ran task %s of a type with a push target", id)
	default:
	}
	mu.Lock()
	for _, id := range ids {
		if !delivered[id] {
			t.Errorf("task %s succeeded without a push delivery", id)
		}
	}
	mu.Unlock()
	if id := mustEnqueue(t, e, "gain.other", `2`); recvWithin(t, ran, 10*time.Second, "the handler of the other type") != id {
		t.Fatal("the handler ran another task")
	}

	if _, err := e.PutType(ctx, TypeSpec{Type: "gain.push"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pusher to drop the target", func() bool { return !pushFetching(e, "gain.push") })
	if id := mustEnqueue(t, e, "gain.push", `3`); recvWithin(t, ran, 10*time.Second, "the handler once the target is gone") != id {
		t.Fatal("the handler ran another task")
	}
}

// heldPushFetches holds the pusher's fetches (worker id "<node>/push")
// while held is open.
type heldPushFetches struct {
	store.Store
	held chan struct{}
}

func (s *heldPushFetches) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	if strings.HasSuffix(p.WorkerID, "/push") {
		<-s.held
	}
	return s.Store.FetchTasks(ctx, p)
}

// TestLongPollLeavesATypeThatGainsAPushTarget: a long poll waiting when
// its type gains a push target leases no task of it: woken, it answers no
// task (the next request is refused), and the engine delivers the task.
// It leased the task.
func TestLongPollLeavesATypeThatGainsAPushTarget(t *testing.T) {
	var mu sync.Mutex
	delivered := map[string]bool{}
	srv := target(t, func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		delivered[r.Header.Get(HeaderTaskID)] = true
		mu.Unlock()
	})
	st := &heldPushFetches{Store: openWorkerStoreOn(t, "sqlite"), held: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.held) })
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	t.Cleanup(release) // before the engine closes: its pusher waits for its fetch
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := startLongPollsErr(ctx, e, 1, "gain.pull")
	waitLongPolls(t, e, 1)
	if _, err := e.PutType(ctx, TypeSpec{Type: "gain.pull", Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pusher to read the target", func() bool { return pushFetching(e, "gain.pull") })
	id := mustEnqueue(t, e, "gain.pull", `1`)
	a := recvWithin(t, got, 10*time.Second, "the long poll to answer")
	if a.err != nil || len(a.tasks) != 0 {
		t.Fatalf("the long poll answered %v, %v; want no task", a.tasks, a.err)
	}
	release()
	waitTask(t, e, id, "the task to be delivered", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	mu.Lock()
	defer mu.Unlock()
	if !delivered[id] {
		t.Fatalf("task %s succeeded without a push delivery", id)
	}
}

// TestPushSetWithout: the types a worker fetches are its own less the
// push types, in their order; its own slice when none is a push type.
func TestPushSetWithout(t *testing.T) {
	set := &pushSet{types: map[string]bool{"b": true, "d": true}}
	for _, c := range []struct{ in, want []string }{
		{[]string{"a", "b", "c", "d", "e"}, []string{"a", "c", "e"}},
		{[]string{"b", "a"}, []string{"a"}},
		{[]string{"b", "d"}, []string{}},
		{[]string{"a", "c"}, []string{"a", "c"}},
	} {
		got := set.without(c.in)
		if strings.Join(got, ",") != strings.Join(c.want, ",") || len(got) != len(c.want) {
			t.Errorf("without(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []string{"a", "c"}
	if got := set.without(in); &got[0] != &in[0] {
		t.Error("without copied a list that holds no push type")
	}
	var none *pushSet
	if got := none.without(in); &got[0] != &in[0] || none.has("a") {
		t.Error("a nil set is not empty")
	}
}

// heldWorkerFetch holds one fetch of the in-process worker named worker,
// once armed, until release closes (blocked says it is held, done that it
// returned), and every fetch of the pusher until pushHeld closes.
type heldWorkerFetch struct {
	store.Store
	worker   string
	armed    atomic.Bool
	blocked  chan struct{}
	release  chan struct{}
	done     chan struct{}
	pushHeld chan struct{}
}

func (s *heldWorkerFetch) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	if strings.HasSuffix(p.WorkerID, "/push") {
		<-s.pushHeld
	}
	if p.WorkerID != s.worker || !s.armed.CompareAndSwap(true, false) {
		return s.Store.FetchTasks(ctx, p)
	}
	s.blocked <- struct{}{}
	<-s.release
	defer func() { s.done <- struct{}{} }()
	return s.Store.FetchTasks(ctx, p)
}

// midFetchGain runs a fetch (start, by the worker or lease request named
// "held") of type typ that is held after it read its types, sets a push
// target for typ meanwhile, enqueues a task of it, and lets the fetch
// commit before the pusher may fetch: the fetch leases the task with its
// stale types. It returns the engine, the task's id, and a report of
// whether the task reached the push target; after returns, the pusher is
// released.
func midFetchGain(t *testing.T, typ string, start func(*Engine)) (e *Engine, id string, after func(), delivered func() bool) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]bool{}
	srv := target(t, func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(HeaderTaskID)] = true
		mu.Unlock()
	})
	st := &heldWorkerFetch{Store: openWorkerStoreOn(t, "sqlite"), worker: "held",
		blocked: make(chan struct{}, 1), release: make(chan struct{}), done: make(chan struct{}, 1), pushHeld: make(chan struct{})}
	releaseFetch := sync.OnceFunc(func() { close(st.release) })
	releasePush := sync.OnceFunc(func() { close(st.pushHeld) })
	e = startWorkerEngine(t, st, Config{NoScheduler: true})
	t.Cleanup(releasePush) // before the engine closes: its fetchers wait
	t.Cleanup(releaseFetch)
	st.armed.Store(true)
	start(e)
	recvWithin(t, st.blocked, 10*time.Second, "the fetch to be held")
	if _, err := e.PutType(context.Background(), TypeSpec{Type: typ, Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pusher to read the target", func() bool { return pushFetching(e, typ) })
	id = mustEnqueue(t, e, typ, `1`)
	releaseFetch()
	recvWithin(t, st.done, 10*time.Second, "the held fetch to return")
	return e, id, releasePush, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[id]
	}
}

// checkDeliveredOnce waits for task id to succeed and checks it reached
// the push target in its one attempt (a release counts none).
func checkDeliveredOnce(t *testing.T, e *Engine, id string, delivered func() bool) {
	t.Helper()
	tk := waitTask(t, e, id, "the task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if !delivered() {
		t.Errorf("task %s succeeded without a push delivery", id)
	}
	if tk.Attempt != 1 {
		t.Errorf("the task took %d attempts, want 1 (a release counts none)", tk.Attempt)
	}
}

// TestWorkerFetchInFlightLeavesATypeThatGainsAPushTarget: a worker's fetch
// whose types were read before its type gained a push target, and that
// leases a task of it after, gives the task back for the engine to
// deliver: the in-process handler does not run it, and no attempt is
// counted. The handler ran it.
func TestWorkerFetchInFlightLeavesATypeThatGainsAPushTarget(t *testing.T) {
	ran := make(chan string, 8)
	e, id, after, delivered := midFetchGain(t, "gain.held", func(e *Engine) {
		runWorker(t, e, WorkerConfig{ID: "held", Types: []string{"gain.held"}, Concurrency: 1, Handle: func(_ context.Context, tk *store.Task) error {
			ran <- tk.ID
			return nil
		}})
	})
	after()
	checkDeliveredOnce(t, e, id, delivered)
	select {
	case got := <-ran:
		t.Fatalf("the in-process handler ran task %s of a type with a push target", got)
	default:
	}
}

// TestLeaseInFlightLeavesATypeThatGainsAPushTarget: the same for a lease
// request over HTTP: it answers without the task, which the engine
// delivers. The pull worker got the task.
func TestLeaseInFlightLeavesATypeThatGainsAPushTarget(t *testing.T) {
	answer := make(chan leaseAnswer, 1)
	e, id, after, delivered := midFetchGain(t, "gain.pulled", func(e *Engine) {
		go func() {
			ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "held", Types: []string{"gain.pulled"}, Max: 1})
			answer <- leaseAnswer{ts, err}
		}()
	})
	a := recvWithin(t, answer, 10*time.Second, "the lease answer")
	if a.err != nil || len(a.tasks) != 0 {
		t.Fatalf("the lease request answered %v, %v; want no task", a.tasks, a.err)
	}
	after()
	checkDeliveredOnce(t, e, id, delivered)
}
