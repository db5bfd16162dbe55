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
			continue
		}
		limit := int(min(free, int64(w.cfg.FetchBatch)))
		// Hold direct dispatch while the fetch is in flight and its tasks
		// are handed out: the tasks it was woken for come first.
		w.drained.Store(false)
		tasks, err := w.fetch(ctx, limit)
		if err == nil && ctx.Err() != nil {
			// Stopping: give back what the fetch leased.
			w.releaseFetched(tasks)
			break
		}
		if err != nil {
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
		for i := range tasks {
			t := &tasks[i]
			w.inFlight.Add(1)
			w.mu.Lock()
			w.active[t.ID] = t
			w.mu.Unlock()
			e.leases.addTask(t)
			w.queue <- t // executors drain the queue; it has room for capacity + Concurrency

		}
		backlog = more
		w.drained.Store(!backlog)
		if backlog {
			continue // there may be more
		}
		resetTimer(timer, e.cfg.PollInterval)
		w.waitWake(ctx, sub, timer, fetched)
	}
}

// waitWake waits, drained, until sub is woken, the poll timer fires or
// ctx ends. A wake-up for tasks the last fetch leased alone (fetched) is
// skipped: it came from the commit that made them due, which the fetch
// followed or shared. Fetching for it would find nothing, and keep the
// next enqueues from being leased at insert (tryReserve) meanwhile; on
// SQLite, whose fetches queue behind inserts, the worker then fetched
// nine tasks in ten of a stream of single enqueues.
func (w *workerRun) waitWake(ctx context.Context, sub chan struct{}, timer *time.Timer, fetched []string) {
	held := func(id string) bool { return slices.Contains(fetched, id) }
	// Each stale wake-up is for one of fetched, at most once: past that
	// many, the wait ends and the worker fetches.
	for range len(fetched) + 1 {
		select {
		case <-sub:
			if w.e.wake.tookStale(sub, held) {
				continue
			}
		case <-timer.C:
		case <-ctx.Done():
		}
		return
	}
}
