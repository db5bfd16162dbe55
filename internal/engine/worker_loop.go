package engine

import (
	"context"
	"slices"
	"time"
)

// The fetch loop of an in-process worker: when it fetches, how much, and
// when it is open to direct dispatch (see dispatch.go).

func (w *workerRun) loop(ctx context.Context) {
	e := w.e
	sub := e.wake.subscribe(w.cfg.Types...)
	defer e.wake.unsubscribe(sub)
	timer := time.NewTimer(e.cfg.PollInterval)
	defer timer.Stop()
	retry := newFetchRetry(e.log, "", "worker", w.cfg.ID)
	// While there is a backlog (the last fetch came back full, or cut short
	// by its payload bytes: fetchMayHaveMore), wait until half the capacity
	// is free before fetching again, so fetches stay large and commits few; when the queue is drained, any free slot fetches at
	// once, so a new task starts within milliseconds.
	backlog := false
	batchMin := max(1, min(w.capacity/2, int64(w.cfg.FetchBatch)))
	// The ids of the tasks the last fetch leased: a wake-up for those
	// alone is stale (see waitWake).
	var fetched []string
	// How many tasks, each named by its own wake-up, the worker was woken
	// for and does not hold; -1 when it does not know (see openFetch).
	named := -1
	for ctx.Err() == nil {
		free := w.capacity - w.inFlight.Load()
		if free <= 0 || (backlog && free < batchMin) {
			// Tasks that become pending now wait for this worker's next
			// fetch: until it has taken them, no enqueue may be leased to
			// it at insert, ahead of them, as soon as a handler frees.
			w.drained.Store(false)
			select {
			case <-w.freed:
			case <-ctx.Done():
			}
			named = -1
			continue
		}
		limit := int(min(free, int64(w.cfg.FetchBatch)))
		// Hold direct dispatch while the fetch is in flight and its tasks
		// are handed out, so that the tasks it was woken for come first;
		// unless it knows them all (openFetch).
		set := w.openFetch(named, limit)
		if set > 0 {
			limit = set
		} else {
			w.drained.Store(false)
		}
		named = -1
		tasks, err := w.fetch(ctx, limit)
		if err == nil && ctx.Err() != nil {
			// Stopping: give back what the fetch leased.
			w.inFlight.Add(-int64(set))
			w.releaseFetched(tasks)
			break
		}
		if err != nil {
			w.inFlight.Add(-int64(set))
			if ctx.Err() != nil {
				break
			}
			retry.failed(ctx, sub, err) // logged once per outage
			continue
		}
		retry.succeeded()
		e.ctr.fetches.Add(1)
		e.ctr.fetched.Add(int64(len(tasks)))
		more := fetchMayHaveMore(tasks, limit)
		tasks = w.leavePushed(tasks)
		fetched = fetched[:0]
		for i := range tasks {
			fetched = append(fetched, tasks[i].ID)
		}
		// Count the tasks in flight before handing them out, and give back
		// the handlers set aside that the fetch did not fill.
		w.inFlight.Add(int64(len(tasks) - set))
		for i := range tasks {
			t := &tasks[i]
			w.mu.Lock()
			w.active[t.ID] = t
			w.mu.Unlock()
			e.leases.addTask(t)
			w.queue <- t // executors drain the queue; it has room for capacity + Concurrency
		}
		backlog = more
		if set == 0 || backlog {
			w.drained.Store(!backlog)
		}
		// else: open through the fetch, the worker stays open, unless an
		// enqueue found it full meanwhile (tryReserve): that task is
		// pending, and the worker closed until a fetch takes it.
		if backlog {
			continue // there may be more
		}
		resetTimer(timer, e.cfg.PollInterval)
		named = w.waitWake(ctx, sub, timer, fetched)
	}
}

// openFetch decides whether the fetch about to start leaves the worker
// open to direct dispatch, and if so sets aside handlers for it and
// returns how many (the fetch's limit); else it returns 0.
//
// A worker that is drained (its last fetch came back short, and it was
// not found full since) and was woken only by wake-ups that each named
// their one task knows the tasks pending for it: the named tasks it does
// not hold, short of any made pending a moment before by another path
// whose wake-up has not reached it, the exception direct dispatch already
// allows (see dispatch.go). A fetch of one more than those cannot leave
// one of them behind unless it comes back full, and then the worker stops
// taking tasks at insert until it has fetched the rest. So the enqueues
// that come while it is in flight are leased at insert rather than made
// pending for the next fetch, which on SQLite's single writer kept the
// worker fetching most of a stream of single enqueues. Only when its
// handlers, not its prefetch buffer, have room for the whole fetch: every
// task it fetches, and every one leased at insert meanwhile, starts at
// once, and none waits behind a newer one.
func (w *workerRun) openFetch(named, limit int) int {
	n := named + 1
	if named < 0 || n > limit || !w.drained.Load() {
		return 0
	}
	for {
		cur := w.inFlight.Load()
		if cur+int64(n) > int64(w.cfg.Concurrency) {
			return 0
		}
		if w.inFlight.CompareAndSwap(cur, cur+int64(n)) {
			return n
		}
	}
}

// waitWake waits, drained, until sub is woken, the poll timer fires or
// ctx ends. A wake-up for tasks the last fetch leased alone (fetched) is
// skipped: it came from the commit that made them due, which the fetch
// followed or shared. Fetching for it would find nothing, and keep the
// next enqueues from being leased at insert (tryReserve) meanwhile; on
// SQLite, whose fetches queue behind inserts, the worker then fetched
// nine tasks in ten of a stream of single enqueues.
//
// It returns how many tasks the wake-up it acts on named, each by its own
// wake-up, that the last fetch did not lease; -1 when it does not know
// (broadcaster.tookWake; the timer; ctx).
func (w *workerRun) waitWake(ctx context.Context, sub chan struct{}, timer *time.Timer, fetched []string) (named int) {
	held := func(id string) bool { return slices.Contains(fetched, id) }
	// Each stale wake-up is for one of fetched, at most once: past that
	// many, the wait ends and the worker fetches.
	for range len(fetched) + 1 {
		select {
		case <-sub:
			if named = w.e.wake.tookWake(sub, held); named == 0 {
				continue
			}
			return named
		case <-timer.C:
		case <-ctx.Done():
		}
		return -1
	}
	return -1
}
