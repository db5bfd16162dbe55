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
