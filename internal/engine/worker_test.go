package engine

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// openWorkerStoreOn opens a store of the backend ("sqlite" or "postgres"),
// closed when the test ends (after the engine: cleanups run last-in
// first-out).
func openWorkerStoreOn(t *testing.T, backend string) store.Store {
	t.Helper()
	st := backendtest.Open(t, backend, "NORMAL")
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// startWorkerEngine starts an engine over st (cfg.Store is set here), closed
// when the test ends.
func startWorkerEngine(t *testing.T, st store.Store, cfg Config) *Engine {
	t.Helper()
	cfg.Store = st
	if cfg.NodeID == "" {
		cfg.NodeID = "worker-test"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// testWorker is a RunWorker in its own goroutine.
type testWorker struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// runWorker starts a worker; it is stopped when the test ends, before the
// engine is closed.
func runWorker(t *testing.T, e *Engine, cfg WorkerConfig) *testWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &testWorker{t: t, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if err := e.RunWorker(ctx, cfg); err != nil {
			t.Errorf("run worker: %v", err)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// stop cancels the worker's context and waits for RunWorker to return.
func (w *testWorker) stop() {
	w.once.Do(w.cancel)
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		w.t.Fatalf("worker did not stop")
	}
}

func mustEnqueue(t *testing.T, e *Engine, typ, payload string) string {
	t.Helper()
	res, err := e.Enqueue(context.Background(), EnqueueRequest{Type: typ, Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.Task.ID
}

// enqueueScheduled enqueues a task of type typ due after delay through e,
// again with twice the delay until one is stored scheduled, and returns
// its id: a probe that only the scheduler loops' promotion makes pending.
// The run time is read when the task is made and the insert's time when
// its batch is written, so an insert late by more than the delay, on a
// loaded machine, stores the task pending: it was never promoted.
func enqueueScheduled(t *testing.T, e *Engine, typ string, delay time.Duration) string {
	t.Helper()
	for ; ; delay *= 2 {
		res, err := e.Enqueue(context.Background(), EnqueueRequest{Type: typ, Delay: delay})
		if err != nil {
			t.Fatalf("enqueue %s: %v", typ, err)
		}
		if res.Task.State == store.StateScheduled {
			return res.Task.ID
		}
		if delay > 5*time.Second {
			t.Fatalf("enqueue %s: a task due after %s was stored %s; want scheduled", typ, delay, res.Task.State)
		}
	}
}

// waitTask polls the task until cond holds (10 s at most) and returns it.
func waitTask(t *testing.T, e *Engine, id, what string, cond func(store.Task) bool) store.Task {
	t.Helper()
	var tk store.Task
	waitFor(t, what, func() bool {
		var err error
		tk, err = e.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return cond(tk)
	})
	return tk
}

func mustGet(t *testing.T, e *Engine, id string) store.Task {
	t.Helper()
	tk, err := e.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return tk
}

// recvWithin waits for a value on ch.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// outcomeLog is a store whose RecordOutcomes calls are observed.
type outcomeLog struct {
	store.Store
	mu   sync.Mutex
	outs []store.Outcome
	// seen, if set, runs for every outcome before it is recorded.
	seen func(store.Outcome)
}

func (s *outcomeLog) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	s.mu.Lock()
	s.outs = append(s.outs, p.Outcomes...)
	seen := s.seen
	s.mu.Unlock()
	if seen != nil {
		for _, o := range p.Outcomes {
			seen(o)
		}
	}
	return s.Store.RecordOutcomes(ctx, p)
}

// of returns the outcomes sent for taskID.
func (s *outcomeLog) of(taskID string) []store.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r []store.Outcome
	for _, o := range s.outs {
		if o.TaskID == taskID {
			r = append(r, o)
		}
	}
	return r
}

// TestWorkerShutdownCancelsBeforeRelease: at the end of the shutdown grace
// period a running handler is cancelled first and its lease released only
// once it returned, so the task is never handed to another worker while the
// handler still runs here; the attempt is not counted.
func TestWorkerShutdownCancelsBeforeRelease(t *testing.T) {
	backendtest.Run(t, testWorkerShutdownCancelsBeforeRelease)
}

func testWorkerShutdownCancelsBeforeRelease(t *testing.T, backend string) {
	var returned atomic.Bool // the handler has returned
	var releasedEarly atomic.Bool
	st := &outcomeLog{Store: openWorkerStoreOn(t, backend)}
	st.seen = func(o store.Outcome) {
		if o.State == store.StatePending && !returned.Load() {
			releasedEarly.Store(true)
		}
	}
	e := startWorkerEngine(t, st, Config{LeaseDuration: 5 * time.Second, NoScheduler: true})
	started := make(chan struct{}, 1)
	w := runWorker(t, e, WorkerConfig{Types: []string{"slow"}, Concurrency: 1, ShutdownGrace: 20 * time.Millisecond,
		Handle: func(ctx context.Context, _ *store.Task) error {
			started <- struct{}{}
			<-ctx.Done()
			// Clean-up after the cancellation takes a moment: a lease
			// released before the cancellation would be given back (and
			// could be running elsewhere) meanwhile.
			time.Sleep(200 * time.Millisecond)
			returned.Store(true)
			return ctx.Err()
		}})
	id := mustEnqueue(t, e, "slow", `1`)
	recvWithin(t, started, 10*time.Second, "the handler to start")
	w.stop()
	if !returned.Load() {
		t.Fatal("RunWorker returned before the cancelled handler did")
	}
	if releasedEarly.Load() {
		t.Error("the lease was released while the handler still ran (release before cancel)")
	}
	tk := mustGet(t, e, id)
	if tk.State != store.StatePending || tk.LeaseID != "" {
		t.Errorf("after shutdown: state %s lease %q, want pending and released", tk.State, tk.LeaseID)
	}
	for _, o := range st.of(id) {
		if o.State != store.StatePending {
			t.Errorf("outcome %s recorded for a handler stopped at shutdown; want only the release", o.State)
		}
	}
}

// fetchHook is a store whose first fetch that leases tasks is held after
// it committed, and then answers as a driver does when the caller's context
// ended meanwhile: with the context's error, the leases taken but not
// returned.
type fetchHook struct {
	store.Store
	armed   atomic.Bool
	fetched chan struct{} // closed when the held fetch committed
	proceed chan struct{} // closed by the test to let it return
}

func (s *fetchHook) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if err != nil || len(ts) == 0 || !s.armed.CompareAndSwap(true, false) {
		return ts, err
	}
	close(s.fetched)
	<-s.proceed
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return ts, nil
}

// TestWorkerStoppedDuringFetchReleasesLeases: a worker asked to stop while
// a fetch is committing does not lose what the fetch leased (the tasks
// would wait for the reaper and count an attempt): the fetch ends
// regardless, and the worker releases its tasks.
func TestWorkerStoppedDuringFetchReleasesLeases(t *testing.T) {
	backendtest.Run(t, testWorkerStoppedDuringFetchReleasesLeases)
}

func testWorkerStoppedDuringFetchReleasesLeases(t *testing.T, backend string) {
	st := &fetchHook{Store: openWorkerStoreOn(t, backend), fetched: make(chan struct{}), proceed: make(chan struct{})}
	st.armed.Store(true)
	e := startWorkerEngine(t, st, Config{LeaseDuration: 5 * time.Second, NoScheduler: true})
	// Enqueued before the worker runs, so it is fetched (not handed over
	// at enqueue).
	id := mustEnqueue(t, e, "job", `1`)
	var ran atomic.Bool
	w := runWorker(t, e, WorkerConfig{Types: []string{"job"}, Concurrency: 1,
		Handle: func(context.Context, *store.Task) error { ran.Store(true); return nil }})
	recvWithin(t, st.fetched, 10*time.Second, "the fetch to commit")
	w.cancel() // the worker is told to stop while the fetch is in flight
	close(st.proceed)
	w.stop()
	if ran.Load() {
		t.Error("a task fetched while the worker was stopping ran")
	}
	tk := mustGet(t, e, id)
	if tk.State != store.StatePending || tk.LeaseID != "" {
		t.Errorf("after shutdown: state %s lease %q, want pending and released (the fetched lease was lost)", tk.State, tk.LeaseID)
	}
}

// typeLoadHeld is a store whose GetType waits until release is closed,
// after saying it was called: a type configuration slow to load.
type typeLoadHeld struct {
	store.Store
	called, release chan struct{}
	once            sync.Once
}

func (s *typeLoadHeld) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	s.once.Do(func() { close(s.called) })
	<-s.release
	return s.Store.GetType(ctx, typ)
}

// TestRunWorkerStoppedWhileStartingReturnsNil: a worker stopped while it
// still reads its types' configuration (at start) is stopped as asked, like
// one stopped later, and returns nil rather than a "context canceled" error
// (a supervisor restarting workers would report it as a failure).
func TestRunWorkerStoppedWhileStartingReturnsNil(t *testing.T) {
	st := &typeLoadHeld{Store: openWorkerStoreOn(t, "sqlite"), called: make(chan struct{}), release: make(chan struct{})}
	defer close(st.release)
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.RunWorker(ctx, WorkerConfig{Types: []string{"slow.type"}, Handle: func(context.Context, *store.Task) error { return nil }})
	}()
	select {
	case <-st.called:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never read its type's configuration")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunWorker stopped while starting = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunWorker did not return after its context was cancelled")
	}
}
