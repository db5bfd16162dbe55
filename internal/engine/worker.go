package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/store"
)

// HandleFunc runs one attempt of a task in process.
type HandleFunc func(ctx context.Context, t *store.Task) error

// WorkerConfig configures an in-process worker.
type WorkerConfig struct {
	// ID names the worker in leases and history. Default: node id + "/w" + n.
	ID string
	// Types the worker handles; required.
	Types []string
	// Concurrency is how many handlers run at once. Default 10.
	Concurrency int
	// Prefetch is how many leased tasks may wait in the worker's buffer for
	// a free handler, so that fetches (and their commits) stay large under
	// load. Buffered tasks are heartbeated like running ones and released at
	// shutdown. Default 3×Concurrency; negative disables prefetching.
	Prefetch int
	// Handle runs one attempt; required.
	Handle HandleFunc
	// ShutdownGrace is how long running handlers may finish after the worker
	// is asked to stop, before their contexts are cancelled and their leases
	// released for another worker. Default 10s. Engine.EndGraces ends it
	// early.
	ShutdownGrace time.Duration
	// FetchBatch caps how many tasks one fetch leases. Default
	// min(Concurrency+Prefetch, 500).
	FetchBatch int
}

var workerSeq atomic.Int64

// ErrAttemptTimeout is the cancellation cause (context.Cause) of a handler
// whose attempt ran past its type's timeout.
var ErrAttemptTimeout = errors.New("attempt timed out")

// ErrWorkerStopped is the cancellation cause (context.Cause) of a handler
// still running when its worker stopped and its ShutdownGrace ran out: the
// attempt is not counted and the task runs again.
var ErrWorkerStopped = errors.New("worker stopped: shutdown grace over")

// RunWorker fetches and runs tasks until ctx is cancelled, then shuts down
// gracefully: it stops fetching, releases prefetched tasks that have not
// started, lets running handlers finish within ShutdownGrace, releases the
// leases of those still running so another worker takes them at once, and
// flushes every outcome before returning. A worker stopped that way, even
// while it is still starting, returns nil. A type with a push target is
// refused; one that gains a target while the worker runs is left to the
// engine's deliveries until the target is removed (push_types.go).
func (e *Engine) RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if cfg.Handle == nil {
		return errors.New("run worker: Handle: required")
	}
	if len(cfg.Types) == 0 || len(cfg.Types) > store.MaxFetchTypes {
		return fmt.Errorf("run worker: Types: between 1 and %d types are required (got %d)", store.MaxFetchTypes, len(cfg.Types))
	}
	for _, t := range cfg.Types {
		if err := ValidateType("Types", t); err != nil {
			return fmt.Errorf("run worker: %w", err)
		}
	}
	if err := e.checkNoPushTargets(ctx, cfg.Types); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing was fetched
		}
		return fmt.Errorf("run worker: %w", err)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10
	}
	switch {
	case cfg.Prefetch == 0:
		cfg.Prefetch = 3 * cfg.Concurrency
	case cfg.Prefetch < 0:
		cfg.Prefetch = 0
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.FetchBatch <= 0 {
		cfg.FetchBatch = min(cfg.Concurrency+cfg.Prefetch, 500)
	}
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("%s/w%d", e.cfg.NodeID, workerSeq.Add(1))
	}
	capacity := cfg.Concurrency + cfg.Prefetch
	w := &workerRun{e: e, cfg: cfg, capacity: int64(capacity), freed: make(chan struct{}, 1),
		queue: make(chan *store.Task, capacity+cfg.Concurrency), active: make(map[string]*store.Task)}
	// Engine.Close stops the worker too, as if ctx were cancelled.
	ctx, err := e.track(ctx, w)
	if err != nil {
		return fmt.Errorf("run worker: %w", err)
	}
	defer e.untrack(w)
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	defer w.cancelHandlers(ErrWorkerStopped)
	for i := 0; i < cfg.Concurrency; i++ {
		w.executors.Add(1)
		go w.executor()
	}
	e.locals.add(w)
	w.loop(ctx)
	e.locals.remove(w)
	w.shutdown()
	return nil
}

type workerRun struct {
	e              *Engine
	cfg            WorkerConfig
	capacity       int64        // Concurrency + Prefetch
	inFlight       atomic.Int64 // leased and not finished (buffered or running)
	freed          chan struct{}
	queue          chan *store.Task
	executors      sync.WaitGroup
	pending        counter // outcomes submitted but not yet committed
	handlerCtx     context.Context
	cancelHandlers context.CancelCauseFunc
	mu             sync.Mutex
	// active holds the leased tasks by id (for release). A task leased again
	// while an older copy is still buffered or running maps to the newest
	// copy; an older copy never removes it (see finish).
	active map[string]*store.Task
	// drained is true while the worker has no backlog (its last fetch came
	// back short) and is neither fetching (short of a fetch for tasks it
	// knows by name: openFetch) nor full (tasks may have become pending
	// that it could not fetch yet): only then may enqueues dispatch to it
	// directly.
	drained atomic.Bool
	// closing (under sendMu) stops direct deliveries once shutdown began;
	// deliveries hold sendMu for reading so the queue is never closed under
	// a send.
	sendMu  sync.RWMutex
	closing bool
	// pushSeen is the set of push types the worker last saw, and types
	// cfg.Types less those (fetchTypes); the fetch loop's alone.
	pushSeen *pushSet
	types    []string
}

// tryReserve takes a handler slot for a directly dispatched task if the
// worker has no backlog and an idle handler. A worker found full is no
// longer drained: the task it refused becomes pending, and until the
// worker's next fetch has taken it no enqueue may be leased to it ahead of
// that task, as soon as a handler frees (its loop, waiting for a wake-up,
// may not have run yet to find itself full).
func (w *workerRun) tryReserve() bool {
	if !w.drained.Load() {
		return false
	}
	for {
		cur := w.inFlight.Load()
		if cur >= int64(w.cfg.Concurrency) {
			w.drained.Store(false)
			return false
		}
		if w.inFlight.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// unreserve gives back a slot taken by tryReserve.
func (w *workerRun) unreserve() {
	w.inFlight.Add(-1)
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// deliver hands a task leased at enqueue to the worker. Its slot was
// reserved by tryReserve.
func (w *workerRun) deliver(t *store.Task) {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.closing {
		w.release([]*store.Task{t})
		w.unreserve()
		return
	}
	w.mu.Lock()
	w.active[t.ID] = t
	w.mu.Unlock()
	w.e.leases.addTask(t)
	w.queue <- t
}

func (w *workerRun) executor() {
	drained := false
	defer func() {
		if !drained {
			// A handler called runtime.Goexit, which ends this goroutine
			// whatever it does (execute recorded the attempt): another
			// takes its place, so the worker keeps its Concurrency.
			w.executors.Add(1)
			go w.executor()
		}
		w.executors.Done()
	}()
	for t := range w.queue {
		w.execute(t)
	}
	drained = true
}

func (w *workerRun) finish(t *store.Task) {
	w.mu.Lock()
	if w.active[t.ID] == t { // not a newer copy of the task
		delete(w.active, t.ID)
	}
	w.mu.Unlock()
	w.inFlight.Add(-1)
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

func (w *workerRun) execute(t *store.Task) {
	e := w.e
	defer w.finish(t)
	if w.handlerCtx.Err() != nil {
		// The shutdown grace period is over and the task never started:
		// give its lease back.
		w.release([]*store.Task{t})
		return
	}
	spec, err := e.decidingSpec(w.handlerCtx, t.Type)
	if err != nil {
		// The handler does not start under a timeout, nor end under a
		// policy, that is not its type's: the task is held back.
		if w.handlerCtx.Err() != nil {
			w.release([]*store.Task{t})
		} else {
			w.giveBackOutcome(t, e.holdBack(t, err))
		}
		return
	}
	leaseCtx, cancelLease := context.WithCancelCause(w.handlerCtx)
	started, expiring := e.leases.startInTime(t.ID, t.LeaseID, cancelLease, e.now(), watchdogMargin(e.cfg.LeaseDuration))
	if !started {
		cancelLease(nil)
		e.leases.remove(t.ID, t.LeaseID)
		if expiring {
			// As after a watchdog stop: a heartbeat on its way may have
			// kept the lease; give it back, the attempt not counted.
			e.log.Warn("lease about to expire before the task started; giving it back", "task_id", t.ID, "type", t.Type, "lease_id", t.LeaseID)
			w.giveBack(t)
			return
		}
		e.log.Warn("lease lost before the task started; skipped", "task_id", t.ID, "type", t.Type, "lease_id", t.LeaseID)
		return
	}
	ctx, cancel := context.WithTimeoutCause(leaseCtx, spec.Timeout, ErrAttemptTimeout)
	if e.debugging() {
		e.log.Debug("task started", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "worker", w.cfg.ID)
	}
	// A handler that calls runtime.Goexit (t.FailNow in a test, for one)
	// never returns, and recover does not see it: its attempt is concluded
	// as a panic's on the way out, or its lease would stay heartbeated for
	// as long as the process runs.
	exited := true
	defer func() {
		if exited {
			w.conclude(ctx, t, &spec, cancel, cancelLease,
				&PanicError{Value: "runtime.Goexit called", Stack: string(debug.Stack())})
		}
	}()
	err = callHandler(ctx, w.cfg.Handle, t)
	exited = false
	w.conclude(ctx, t, &spec, cancel, cancelLease, err)
}

// conclude records the end of an attempt whose handler returned err under
// ctx (cancel ends it, cancelLease its lease's context): its outcome, or
// nothing when the task was cancelled or its lease lost.
func (w *workerRun) conclude(ctx context.Context, t *store.Task, spec *TypeSpec, cancel context.CancelFunc, cancelLease context.CancelCauseFunc, err error) {
	e := w.e
	cause := context.Cause(ctx)
	cancel()
	cancelLease(nil)
	// The lease stays heartbeated until the outcome has committed (done,
	// below): a commit slower than what is left of the lease must not let
	// the reaper count the finished attempt as lost.
	if !e.leases.finish(t.ID, t.LeaseID) {
		// The task was leased again (here or elsewhere) or released since:
		// this attempt's lease is gone, and its outcome would be refused.
		e.ctr.leaseLost.Add(1)
		e.log.Warn("handler returned after its lease was lost; outcome dropped", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "worker", w.cfg.ID)
		return
	}
	switch {
	case errors.Is(cause, ErrTaskCancelled):
		// The task is cancelled: there is no outcome to record.
		e.leases.remove(t.ID, t.LeaseID)
		e.log.Info("handler stopped: task cancelled", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "worker", w.cfg.ID)
		return
	case err != nil && errors.Is(cause, ErrLeaseLost):
		// Stopped because the lease is gone (reaped, expired): the failure
		// is the stop's, and the store would refuse it anyway.
		e.leases.remove(t.ID, t.LeaseID)
		e.log.Warn("handler stopped: lease lost", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "worker", w.cfg.ID)
		if errors.Is(cause, ErrLeaseExpired) {
			w.giveBack(t) // counts the lease lost if it is
		} else {
			e.ctr.leaseLost.Add(1)
		}
		return
	case err != nil && w.handlerCtx.Err() != nil:
		// Cancelled at the end of the shutdown grace period: give the lease
		// back at once, the attempt not counted, now that the handler has
		// stopped.
		e.log.Info("handler stopped at shutdown; releasing its lease", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "worker", w.cfg.ID)
		w.release([]*store.Task{t})
		return
	}

	var out store.Outcome
	if err == nil {
		out = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
	} else {
		var f Failure
		pe, deadline := inspectHandlerError(err)
		switch {
		case pe != nil:
			f = panicFailure(pe)
		case errors.Is(cause, ErrAttemptTimeout) && deadline:
			f = Failure{Err: fmt.Errorf("attempt timed out after %s: %w", spec.Timeout, err)}
		default:
			f = Failure{Err: err}
		}
		// Decided under the policy as it stands now, not as it stood
		// when the attempt started (decisionSpec).
		dspec := e.decisionSpec(w.handlerCtx, t.Type, spec)
		out = e.Decide(t, dspec, f, e.now())
	}
	w.pending.Add(1)
	e.outcomes.submit(out, func(_ struct{}, err error) {
		e.leases.remove(t.ID, t.LeaseID)
		e.logOutcome(t, &out, err)
		w.pending.Done()
	})
}

// callHandler runs the handler, turning a panic into a *PanicError. (An
// error returned whose methods panic is turned into one where the worker
// and Decide inspect it: inspectHandlerError, classifyError.)
func callHandler(ctx context.Context, h HandleFunc, t *store.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return h(ctx, t)
}

func (w *workerRun) shutdown() {
	e := w.e
	// No more direct deliveries; tasks still waiting in the prefetch buffer
	// have not started: release them at once.
	w.sendMu.Lock()
	w.closing = true
	w.sendMu.Unlock()
	var waiting []*store.Task
drain:
	for {
		select {
		case t := <-w.queue:
			waiting = append(waiting, t)
		default:
			break drain
		}
	}
	close(w.queue)
	w.release(waiting)
	for _, t := range waiting {
		w.finish(t)
	}
	done := make(chan struct{})
	go func() {
		w.executors.Wait()
		close(done)
	}()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.cancelRunning(done)
	case <-e.gracesEnded:
		w.cancelRunning(done)
	}
	w.pending.Wait()
}

// cancelRunning stops the handlers still running once the shutdown grace
// is over; done is closed when they have all returned.
func (w *workerRun) cancelRunning(done <-chan struct{}) {
	e := w.e
	// Cancel what is still running. Each handler that stops releases
	// its lease (execute) so another worker starts the task at once;
	// releasing before the cancellation would let another worker start
	// a task while its handler here still runs.
	w.cancelHandlers(ErrWorkerStopped)
	select {
	case <-done:
	case <-time.After(time.Second):
		// Release the leases of handlers that ignore the cancellation
		// anyway; whatever they return later is dropped.
		w.mu.Lock()
		var rel []*store.Task
		for _, t := range w.active {
			rel = append(rel, t)
		}
		w.mu.Unlock()
		e.log.Warn("handlers ignored cancellation at shutdown; releasing their leases", "worker", w.cfg.ID, "handlers", len(rel))
		w.release(rel)
	}
}

// giveBack releases the lease of a handler the lease watchdog stopped
// (ErrLeaseExpired).
func (w *workerRun) giveBack(t *store.Task) {
	w.pending.Add(1)
	w.e.giveBackExpired(t, w.pending.Done)
}

// release gives leases back (pending again, attempt not counted).
func (w *workerRun) release(ts []*store.Task) {
	for _, t := range ts {
		w.giveBackOutcome(t, store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending})
	}
}

// giveBackOutcome records out, a release of t's lease (at once or delayed),
// without waiting for the commit.
//
// The lease stays heartbeated until the release has committed, so that a
// slow commit does not let the reaper count an attempt that never ran.
func (w *workerRun) giveBackOutcome(t *store.Task, out store.Outcome) {
	e := w.e
	e.leases.finish(t.ID, t.LeaseID)
	w.pending.Add(1)
	e.outcomes.submit(out, func(_ struct{}, err error) {
		e.leases.remove(t.ID, t.LeaseID)
		e.logOutcome(t, &out, err)
		w.pending.Done()
	})
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// counter is a WaitGroup that tolerates Add after Wait began (a handler that
// ignored cancellation may still report after shutdown stopped waiting).
type counter struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func (c *counter) Add(d int) {
	c.mu.Lock()
	c.n += d
	if c.n <= 0 && c.cond != nil {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

func (c *counter) Done() { c.Add(-1) }

func (c *counter) Wait() {
	c.mu.Lock()
	if c.cond == nil {
		c.cond = sync.NewCond(&c.mu)
	}
	for c.n > 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
}
