package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// testRetentionSparesRedrivenTasks: retention passes racing a bulk redrive
// and one-task retries over the same dead tasks, all past their retention.
// Each task ends either redriven (pending, its history kept) or deleted
// and counted, never both and never neither: retention never deletes a
// task a redrive moved back to pending, nor its history, and a redrive
// never reports a task retention took.
func testRetentionSparesRedrivenTasks(e *env) {
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rr_%02d", i)
		e.makeState(base, nt(ids[i], "rr"), store.StateDead)
	}
	now := base.Add(2 * time.Hour)
	p := store.RetentionParams{DeadBefore: base.Add(time.Hour), Limit: 4}
	var (
		mu              sync.Mutex
		bulk, retention int
		single          = map[string]bool{} // retried one at a time
		wg              sync.WaitGroup
		errs            = make(chan error, 3)
	)
	wg.Add(3)
	go func() { // retention, a batch at a time
		defer wg.Done()
		for range n { // bounded: each pass deletes at least one task until none is left
			r, err := e.s.DeleteFinished(e.ctx, p)
			if err != nil {
				errs <- fmt.Errorf("DeleteFinished: %w", err)
				return
			}
			mu.Lock()
			retention += r.Dead
			mu.Unlock()
			if r.Dead == 0 {
				return
			}
		}
	}()
	go func() { // a bulk redrive, a few tasks at a time
		defer wg.Done()
		for range n {
			k, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "rr", Limit: 3, Now: now})
			if err != nil {
				errs <- fmt.Errorf("RedriveDead: %w", err)
				return
			}
			mu.Lock()
			bulk += k
			mu.Unlock()
		}
	}()
	go func() { // manual retries of every other task, newest first
		defer wg.Done()
		for i := n - 1; i >= 0; i -= 2 {
			_, err := e.s.RetryTask(e.ctx, store.RetryParams{ID: ids[i], Now: now})
			var ce *store.ConflictError
			switch {
			case err == nil:
				mu.Lock()
				single[ids[i]] = true
				mu.Unlock()
			case errors.Is(err, store.ErrNotFound), errors.As(err, &ce):
				// deleted by retention, or already redriven
			default:
				errs <- fmt.Errorf("RetryTask(%s): %w", ids[i], err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		e.noErr("racing retention and redrive", err)
	}
	// A retention pass that lost every race may have stopped early: finish.
	r, err := e.s.DeleteFinished(e.ctx, store.RetentionParams{DeadBefore: base.Add(time.Hour)})
	e.noErr("DeleteFinished", err)
	retention += r.Dead

	pending, gone := 0, 0
	for _, id := range ids {
		t, err := e.s.GetTask(e.ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			gone++
			if single[id] {
				e.t.Errorf("%s: retried (RetryTask answered it) but then deleted by retention", id)
			}
			continue
		}
		e.noErr("GetTask("+id+")", err)
		pending++
		if t.State != store.StatePending {
			e.t.Errorf("%s: state %s, want pending (redriven) or deleted", id, t.State)
		}
		e.eqTime(id+" UpdatedAt", t.UpdatedAt, now)
		e.eq(id+" history kept", len(e.attempts(id)), 1)
	}
	e.eq("redriven (bulk and single) = tasks left pending", bulk+len(single), pending)
	e.eq("deleted by retention = tasks gone", retention, gone)
	counted := e.retentionDeleted("rr", store.StateDead)
	e.eq("retention counted", counted, gone)
}

// retentionDeleted is how many tasks of typ in state retention has deleted,
// as Stats reports it.
func (e *env) retentionDeleted(typ string, state store.State) int {
	e.t.Helper()
	st, err := e.s.Stats(e.ctx, store.StatsParams{})
	e.noErr("Stats", err)
	for _, ts := range st {
		if ts.Type == typ {
			return ts.RetentionDeleted[state]
		}
	}
	return 0
}

// testRedrivesAndPurgeRacing: two bulk redrives and a purge, a few tasks at
// a time, racing over the same dead tasks until each finds none left.
// Every task is taken exactly once: redriven (pending, its history kept)
// or purged, the counts the calls return add up to the tasks, and none is
// left dead. None waits for another forever, though each now waits for
// the tasks another holds rather than skipping them (PostgreSQL).
func testRedrivesAndPurgeRacing(e *env) {
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rp_%02d", i)
		e.makeState(base.Add(time.Duration(i%7)*time.Second), nt(ids[i], "rp"), store.StateDead)
	}
	now := base.Add(time.Hour)
	var (
		mu                 sync.Mutex
		redriven, purged   int
		wg                 sync.WaitGroup
		errs               = make(chan error, 3)
		redrive, purgeCall = func(limit int) (int, error) {
			return e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "rp", Limit: limit, Now: now})
		}, func(limit int) (int, error) {
			return e.s.PurgeDead(e.ctx, store.DeadFilter{Type: "rp", Limit: limit})
		}
	)
	run := func(name string, call func(int) (int, error), limit int, sum *int) {
		defer wg.Done()
		for range n { // bounded: each call takes at least one task until none is left
			k, err := call(limit)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			mu.Lock()
			*sum += k
			mu.Unlock()
			if k == 0 {
				return
			}
		}
	}
	wg.Add(3)
	go run("RedriveDead", redrive, 5, &redriven)
	go run("RedriveDead", redrive, 3, &redriven)
	go run("PurgeDead", purgeCall, 4, &purged)
	wg.Wait()
	close(errs)
	for err := range errs {
		e.noErr("racing redrives and purge", err)
	}
	e.eq("dead left", len(e.listDead(store.DeadFilter{Type: "rp", Limit: 100})), 0)
	pending, gone := 0, 0
	for _, id := range ids {
		t, err := e.s.GetTask(e.ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			gone++
			continue
		}
		e.noErr("GetTask("+id+")", err)
		pending++
		if t.State != store.StatePending {
			e.t.Errorf("%s: state %s, want pending (redriven) or purged", id, t.State)
		}
		e.eq(id+" history kept", len(e.attempts(id)), 1)
	}
	e.eq("redriven = tasks left pending", redriven, pending)
	e.eq("purged = tasks gone", purged, gone)
}
