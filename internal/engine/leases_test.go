package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestLeaseTableActsOnCurrentLeaseOnly: every operation names the lease,
// and one that is not the task's current lease changes nothing; a new lease
// for the task makes the older one lost and stops its handler.
func TestLeaseTableActsOnCurrentLeaseOnly(t *testing.T) {
	lt := newLeaseTable()
	exp := time.Now().Add(time.Minute)
	lt.add("T", "L1", exp)
	ctx1, cancel1 := context.WithCancelCause(context.Background())
	defer cancel1(nil)
	if !lt.start("T", "L1", cancel1) {
		t.Fatal("start under the current lease refused")
	}

	// The task is leased again (after a cancel and retry, a reap, a release).
	lt.add("T", "L2", exp)
	if !errors.Is(context.Cause(ctx1), ErrLeaseLost) {
		t.Errorf("the handler under the replaced lease: cause %v, want %v", context.Cause(ctx1), ErrLeaseLost)
	}
	if lt.start("T", "L1", func(error) {}) {
		t.Error("a copy under the replaced lease L1 may start")
	}
	if lt.cancelled("T", "L1") {
		t.Error("cancelled(L1) acted on the lease L2")
	}
	if lt.remove("T", "L1") {
		t.Error("remove(L1) reported L1 as current")
	}
	if got := lt.leaseOf("T"); got != "L2" {
		t.Fatalf("after remove(L1): lease %q, want L2 (the stale copy dropped the current lease)", got)
	}
	if !lt.start("T", "L2", func(error) {}) {
		t.Error("start under the current lease L2 refused")
	}
	if !lt.remove("T", "L2") {
		t.Error("remove(L2) did not find the current lease")
	}
	if got := lt.leaseOf("T"); got != "" {
		t.Errorf("after remove(L2): lease %q, want none", got)
	}
}

// TestLeaseTableExpire: the watchdog scan stops handlers whose last known
// expiry is less than the margin away, keeps the others and tells when the
// next is to be stopped.
func TestLeaseTableExpire(t *testing.T) {
	lt := newLeaseTable()
	now := time.Now()
	lt.add("old", "L1", now.Add(-time.Millisecond))
	lt.add("new", "L2", now.Add(time.Minute))
	lt.add("waiting", "L3", now.Add(-time.Second)) // prefetched, not started
	ctxOld, cancelOld := context.WithCancelCause(context.Background())
	defer cancelOld(nil)
	ctxNew, cancelNew := context.WithCancelCause(context.Background())
	defer cancelNew(nil)
	lt.start("old", "L1", cancelOld)
	lt.start("new", "L2", cancelNew)

	stopped, next := lt.expire(now, 0)
	if len(stopped) != 2 {
		t.Errorf("stopped %v, want old and waiting", stopped)
	}
	if !errors.Is(context.Cause(ctxOld), ErrLeaseLost) {
		t.Errorf("expired lease's handler: cause %v, want %v", context.Cause(ctxOld), ErrLeaseLost)
	}
	if ctxNew.Err() != nil {
		t.Error("a lease that has not expired was stopped")
	}
	if !next.Equal(now.Add(time.Minute)) {
		t.Errorf("next expiry %v, want %v", next, now.Add(time.Minute))
	}
	if lt.start("waiting", "L3", func(error) {}) {
		t.Error("a task whose lease expired in the prefetch buffer may start")
	}
	if stopped, _ := lt.expire(now, 0); len(stopped) != 0 {
		t.Errorf("second scan stopped %v again", stopped)
	}
	// With a margin, a lease is stopped that long before its expiry, and
	// the next instant told is the next expiry less the margin.
	lt.add("soon", "L4", now.Add(30*time.Second))
	stopped, next = lt.expire(now, 40*time.Second)
	if len(stopped) != 1 || stopped[0] != "soon" {
		t.Errorf("with a 40s margin, stopped %v, want soon (expiring in 30s)", stopped)
	}
	if want := now.Add(20 * time.Second); !next.Equal(want) {
		t.Errorf("with a 40s margin, next %v, want %v (a minute away less the margin)", next, want)
	}
}

// TestWorkerSkipsStaleCopyOfTask: a task prefetched under lease L1, then
// cancelled, retried and prefetched again under L2 by the same worker,
// runs once, under L2: the stale L1 copy does not start (it used to start,
// under the new lease's entry, and then drop it), and it does not remove
// the L2 copy from the worker's active set, so the shutdown still releases
// L2 when its handler ignores the cancellation.
func TestWorkerSkipsStaleCopyOfTask(t *testing.T) { backendtest.Run(t, testWorkerSkipsStaleCopyOfTask) }

func testWorkerSkipsStaleCopyOfTask(t *testing.T, backend string) {
	st := openWorkerStoreOn(t, backend)
	e := startWorkerEngine(t, st, Config{LeaseDuration: 5 * time.Second, NoScheduler: true})
	ctx := context.Background()
	aStarted, releaseA := make(chan struct{}), make(chan struct{})
	runs := make(chan string, 8) // lease ids the task T ran under
	releaseT := make(chan struct{})
	freeT := sync.OnceFunc(func() { close(releaseT) })
	t.Cleanup(freeT)
	w := runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 20 * time.Millisecond,
		Handle: func(_ context.Context, tk *store.Task) error {
			if string(tk.Payload) == `"A"` {
				close(aStarted)
				<-releaseA
				return nil
			}
			runs <- tk.LeaseID
			<-releaseT // ignores its cancellation at shutdown
			return errors.New("stopped late")
		}})
	mustEnqueue(t, e, "x", `"A"`)
	recvWithin(t, aStarted, 10*time.Second, "A to start")
	// A holds the only handler: T waits in the prefetch buffer.
	id := mustEnqueue(t, e, "x", `"T"`)
	l1 := waitTask(t, e, id, "T prefetched", func(tk store.Task) bool { return tk.State == store.StateRunning }).LeaseID
	if _, err := e.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	l2 := waitTask(t, e, id, "T prefetched again", func(tk store.Task) bool {
		return tk.State == store.StateRunning && tk.LeaseID != l1
	}).LeaseID
	close(releaseA)
	if got := recvWithin(t, runs, 10*time.Second, "T to start"); got != l2 {
		t.Fatalf("T ran under lease %s, its cancelled lease (current: %s)", got, l2)
	}
	if got := e.leases.leaseOf(id); got != l2 {
		t.Fatalf("lease table holds %q for T, want %s", got, l2)
	}

	// Stop: the handler ignores its cancellation, so its lease is released
	// for it (after a second) while it still runs.
	stopped := make(chan struct{})
	go func() { w.stop(); close(stopped) }()
	tk := waitTask(t, e, id, "T released at shutdown", func(tk store.Task) bool { return tk.State != store.StateRunning })
	if tk.State != store.StatePending {
		t.Errorf("T at shutdown: state %s, want pending (released)", tk.State)
	}
	freeT() // the handler returns now; its result is dropped
	<-stopped
	select {
	case l := <-runs:
		t.Errorf("T ran again, under %s", l)
	default:
	}
}

// TestWorkerStaleHandlerKeepsNewLease: a handler that returns late, after
// its task was cancelled, retried and leased again in the same process,
// leaves the new lease alone: it is still heartbeated (it used to be dropped
// from the lease table, expire and be reaped under its running handler),
// and the new run's outcome is recorded.
func TestWorkerStaleHandlerKeepsNewLease(t *testing.T) {
	backendtest.Run(t, testWorkerStaleHandlerKeepsNewLease)
}

func testWorkerStaleHandlerKeepsNewLease(t *testing.T, backend string) {
	const lease = 600 * time.Millisecond
	st := openWorkerStoreOn(t, backend)
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true})
	ctx := context.Background()
	started := make(chan *store.Task, 4)
	releaseFirst, finishSecond := make(chan struct{}), make(chan struct{})
	var secondCancelled atomic.Bool
	var n atomic.Int32
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 2, Prefetch: -1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(hctx context.Context, tk *store.Task) error {
			c := *tk
			started <- &c
			if n.Add(1) == 1 {
				<-releaseFirst // ignores the cancellation for a while
				return errors.New("first run returns late")
			}
			select {
			case <-hctx.Done():
				secondCancelled.Store(true)
				return hctx.Err()
			case <-finishSecond:
				return nil
			}
		}})
	id := mustEnqueue(t, e, "x", `1`)
	first := recvWithin(t, started, 10*time.Second, "the first run")
	if _, err := e.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	second := recvWithin(t, started, 10*time.Second, "the second run")
	if second.LeaseID == first.LeaseID {
		t.Fatal("the second run has the first run's lease")
	}
	close(releaseFirst)
	returned := time.Now()
	// The second lease must stay in the table and keep being extended well
	// past the first handler's return.
	waitTask(t, e, id, "the second lease extended after the first handler returned", func(tk store.Task) bool {
		if got := e.leases.leaseOf(id); got != second.LeaseID {
			t.Fatalf("lease table holds %q for the task, want the running lease %s", got, second.LeaseID)
		}
		if tk.State != store.StateRunning || tk.LeaseID != second.LeaseID {
			t.Fatalf("task: state %s lease %s, want running under %s", tk.State, tk.LeaseID, second.LeaseID)
		}
		return tk.LeaseExpiresAt.After(returned.Add(2 * lease))
	})
	if secondCancelled.Load() {
		t.Fatal("the second run was cancelled")
	}
	close(finishSecond)
	tk := waitTask(t, e, id, "the task to succeed", func(tk store.Task) bool { return tk.State != store.StateRunning })
	if tk.State != store.StateSucceeded {
		t.Fatalf("task: state %s, want succeeded (the second run's outcome)", tk.State)
	}
	select {
	case r := <-started:
		t.Errorf("a third run started, under %s", r.LeaseID)
	default:
	}
}

// slowCancel is a store whose CancelTask waits for a signal before it goes
// to the database: a cancellation held up in the writer's queue while a
// worker of the same process leases the task.
type slowCancel struct {
	store.Store
	called  chan struct{}
	proceed chan struct{}
}

func (s *slowCancel) CancelTask(ctx context.Context, p store.CancelParams) (store.Task, error) {
	s.called <- struct{}{}
	<-s.proceed
	return s.Store.CancelTask(ctx, p)
}

// TestCancelStopsHandlerLeasedWhileTheCancelWasInFlight: a task that a
// local worker leases after Cancel looked for a local lease of it, and
// before the cancellation committed, is cancelled under that running
// handler; its handler must be told by the time Cancel returns, as for a
// lease held before. It used to run on unaware until the next heartbeat
// (a third of the lease later) or, prefetched, to start after Cancel had
// returned.
func TestCancelStopsHandlerLeasedWhileTheCancelWasInFlight(t *testing.T) {
	backendtest.Run(t, testCancelStopsHandlerLeasedWhileTheCancelWasInFlight)
}

func testCancelStopsHandlerLeasedWhileTheCancelWasInFlight(t *testing.T, backend string) {
	st := &slowCancel{Store: openWorkerStoreOn(t, backend), called: make(chan struct{}, 1), proceed: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{LeaseDuration: 30 * time.Second, NoScheduler: true})
	ctx := context.Background()
	id := mustEnqueue(t, e, "x", `1`) // pending: no worker yet
	type result struct {
		tk  store.Task
		err error
	}
	cancelled := make(chan result, 1)
	go func() {
		tk, err := e.Cancel(ctx, id)
		cancelled <- result{tk, err}
	}()
	recvWithin(t, st.called, 10*time.Second, "the cancellation to reach the store")
	started := make(chan context.Context, 2)
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: blockUntilStopped(started)})
	hctx := recvWithin(t, started, 10*time.Second, "the handler to start")
	close(st.proceed)
	r := recvWithin(t, cancelled, 10*time.Second, "Cancel to return")
	if r.err != nil || r.tk.State != store.StateCancelled {
		t.Fatalf("cancel: %+v %v", r.tk, r.err)
	}
	if hctx.Err() == nil {
		t.Fatal("the running handler of a task was not told when Cancel returned (it runs on until the next heartbeat)")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, ErrTaskCancelled) {
		t.Fatalf("handler's context cause %v, want %v", cause, ErrTaskCancelled)
	}
}

// TestCancelBetweenFetchAndHandoverStopsTheTask: a task cancelled after a
// local worker's fetch of it committed, and before the worker took the
// fetched task in, must not start once Cancel has returned. It used to
// start, and run until the next heartbeat found its lease gone.
func TestCancelBetweenFetchAndHandoverStopsTheTask(t *testing.T) {
	backendtest.Run(t, testCancelBetweenFetchAndHandoverStopsTheTask)
}

func testCancelBetweenFetchAndHandoverStopsTheTask(t *testing.T, backend string) {
	st := &fetchHook{Store: openWorkerStoreOn(t, backend), fetched: make(chan struct{}), proceed: make(chan struct{})}
	st.armed.Store(true)
	e := startWorkerEngine(t, st, Config{LeaseDuration: 30 * time.Second, NoScheduler: true})
	ctx := context.Background()
	id := mustEnqueue(t, e, "x", `1`) // before the worker runs: fetched, not handed over
	started := make(chan context.Context, 2)
	runWorker(t, e, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: blockUntilStopped(started)})
	recvWithin(t, st.fetched, 10*time.Second, "the fetch to commit")
	if _, err := e.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	close(st.proceed) // the worker takes the fetched task in now
	// The worker's next fetch finds nothing: by then the fetched copy was
	// queued, and has started or been skipped.
	fetches := e.Counters().Fetches
	waitFor(t, "the worker's next fetch", func() bool { return e.Counters().Fetches > fetches })
	waitFor(t, "the fetched copy to be started or skipped", func() bool { return e.leases.leaseOf(id) == "" || len(started) > 0 })
	select {
	case hctx := <-started:
		if hctx.Err() == nil {
			t.Fatal("a task cancelled before its fetched copy was taken in started after Cancel returned, unaware")
		}
		t.Fatal("a task cancelled before its fetched copy was taken in started after Cancel returned")
	default:
	}
}

// TestLeaseTableCancelledBeforeAdded: a cancellation of a lease, or of an
// attempt, that this process has not added yet (its fetch or insert is
// still on its way) makes that lease lost on arrival, so its task never
// starts; a later lease of the same task (retried) is not affected; and a
// canceller finds the handler of a lease already marked lost cancelled
// when it returns.
func TestLeaseTableCancelledBeforeAdded(t *testing.T) {
	lt := newLeaseTable()
	exp := time.Now().Add(time.Minute)
	started := time.Now()
	if lt.cancelled("T", "L1") {
		t.Fatal("cancelled(L1) reported a lease not held")
	}
	lt.add("T", "L1", exp)
	if lt.start("T", "L1", func(error) {}) {
		t.Error("a lease cancelled (by id) before it was added may start")
	}
	lt.remove("T", "L1")

	if lt.cancelledAttempt("U", 2, started) {
		t.Fatal("cancelledAttempt reported a lease not held")
	}
	lt.addTask(&store.Task{ID: "U", LeaseID: "L2", LeaseExpiresAt: exp, Attempt: 2, StartedAt: started})
	if lt.start("U", "L2", func(error) {}) {
		t.Error("a lease of an attempt cancelled before it was added may start")
	}
	// Retried and leased again: attempt 1, a later start.
	lt.addTask(&store.Task{ID: "U", LeaseID: "L3", LeaseExpiresAt: exp, Attempt: 1, StartedAt: started.Add(time.Millisecond)})
	if !lt.start("U", "L3", func(error) {}) {
		t.Error("the lease of the retried task's new attempt may not start")
	}

	// Marked lost (by a heartbeat) but not yet cancelled: a canceller
	// cancels the handler itself.
	lt.addTask(&store.Task{ID: "V", LeaseID: "L4", LeaseExpiresAt: exp, Attempt: 1, StartedAt: started})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if !lt.start("V", "L4", cancel) {
		t.Fatal("start refused")
	}
	lt.mu.Lock()
	lt.m["V"].lost = true
	lt.mu.Unlock()
	lt.cancelledAttempt("V", 1, started)
	if !errors.Is(context.Cause(ctx), ErrTaskCancelled) {
		t.Errorf("handler of a lost lease after a cancellation: cause %v, want %v", context.Cause(ctx), ErrTaskCancelled)
	}
}

// notifier is a backend's wake-up and cancellation notifications.
type notifier interface {
	store.Notifier
	store.CancelNotifier
}

// notifyingFetchHook is a fetchHook that passes its backend's
// notifications on.
type notifyingFetchHook struct {
	*fetchHook
	notifier notifier
}

func (s *notifyingFetchHook) Wakeups(ctx context.Context) <-chan struct{} {
	return s.notifier.Wakeups(ctx)
}

func (s *notifyingFetchHook) Cancellations(ctx context.Context) <-chan store.LeaseRef {
	return s.notifier.Cancellations(ctx)
}

// TestCancelOnAnotherNodeBeforeHandoverStopsTheTask: on PostgreSQL, a
// task cancelled on another node after this node's fetch of it committed,
// and before the worker took the fetched task in, never starts here: the
// cancellation's notification, come before the lease, is remembered. It
// used to be dropped, and the task started and ran until the next
// heartbeat found its lease gone.
func TestCancelOnAnotherNodeBeforeHandoverStopsTheTask(t *testing.T) {
	open := backendtest.Database(t, backendtest.Postgres, "")
	pg := open()
	hook := &fetchHook{Store: pg, fetched: make(chan struct{}), proceed: make(chan struct{})}
	hook.armed.Store(true)
	proceed := sync.OnceFunc(func() { close(hook.proceed) })
	t.Cleanup(func() { _ = pg.Close() })
	runnerStore := &notifyingFetchHook{fetchHook: hook, notifier: pg.(notifier)}
	otherStore := open()
	t.Cleanup(func() { _ = otherStore.Close() })
	runner := startWorkerEngine(t, runnerStore, Config{NodeID: "runner", LeaseDuration: 30 * time.Second, NoScheduler: true})
	other := startWorkerEngine(t, otherStore, Config{NodeID: "other", LeaseDuration: 30 * time.Second, NoScheduler: true})
	// Wait until the runner listens: an enqueue on the other node wakes it.
	sub := runner.wake.subscribe()
	defer runner.wake.unsubscribe(sub)
	waitFor(t, "the runner to listen for notifications", func() bool {
		mustEnqueue(t, other, "ping", `1`)
		select {
		case <-sub:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	id := mustEnqueue(t, other, "x", `1`)
	started := make(chan struct{}, 2)
	runWorker(t, runner, WorkerConfig{Types: []string{"x"}, Concurrency: 1, ShutdownGrace: 50 * time.Millisecond,
		Handle: func(hctx context.Context, tk *store.Task) error {
			started <- struct{}{}
			<-hctx.Done()
			return hctx.Err()
		}})
	t.Cleanup(proceed) // before the worker stops: it waits in the fetch
	recvWithin(t, hook.fetched, 10*time.Second, "the fetch to commit")
	tk := mustGet(t, other, id)
	if _, err := other.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// The notification reaches the runner: it remembers the lease.
	waitFor(t, "the runner to remember the cancelled lease it has not taken in yet", func() bool {
		runner.leases.mu.Lock()
		defer runner.leases.mu.Unlock()
		return runner.leases.gone[id].leaseID == tk.LeaseID
	})
	proceed()
	fetches := runner.Counters().Fetches
	waitFor(t, "the runner's next fetch", func() bool { return runner.Counters().Fetches > fetches })
	waitFor(t, "the fetched copy to be started or skipped", func() bool { return runner.leases.leaseOf(id) == "" || len(started) > 0 })
	if len(started) > 0 {
		t.Fatal("a task cancelled on another node before its fetched copy was taken in started")
	}
}

// blockUntilStopped is a handler that sends its context on started and
// runs until that context ends (at most 20 s).
func blockUntilStopped(started chan<- context.Context) HandleFunc {
	return func(hctx context.Context, _ *store.Task) error {
		started <- hctx
		select {
		case <-hctx.Done():
			return hctx.Err()
		case <-time.After(20 * time.Second):
			return errors.New("never cancelled")
		}
	}
}
