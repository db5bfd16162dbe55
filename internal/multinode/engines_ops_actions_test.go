package multinode

// The operations of TestEnginesUnderUserOperations, each noted in the
// model with its answer: sure when it succeeded or was refused, unsure
// when its answer was lost (it may have committed or not).

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// opAnswer sorts an operation's error: done (nil), refused (the store or
// the engine said no: nothing changed), or lost (it may have committed).
// An error of none of the expected kinds fails the test.
func (c *opsCluster) opAnswer(what string, err error) (done, lost bool) {
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return false, false
	case unavailable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, engine.ErrClosed):
		return false, true
	}
	c.t.Errorf("%s: unexpected error %v", what, err)
	return false, true
}

// terminateAll ends every session of the database but the test's own.
func (c *opsCluster) terminateAll() {
	c.m.mu.Lock()
	c.m.cuts = append(c.m.cuts, time.Now())
	c.m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.admin.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> $1`, opsAdminApp)
	if err != nil {
		c.t.Errorf("terminate sessions: %v", err)
	}
	c.m.mu.Lock()
	c.m.cuts = append(c.m.cuts, time.Now())
	c.m.mu.Unlock()
}

// setMaxAttempts changes a type's max attempts through s.
func (c *opsCluster) setMaxAttempts(s *engineSlot, typ string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := opsPolicy{typ: typ, max: n, from: time.Now()}
	_, err := s.e.PutType(ctx, c.spec(typ, n))
	p.to = time.Now()
	p.sure, _ = c.opAnswer("put type "+typ, err)
	c.m.mu.Lock()
	c.m.policies = append(c.m.policies, p)
	c.m.mu.Unlock()
}

// cancelIn cancels a task of typ found in state (it may have moved since).
func (c *opsCluster) cancelIn(s *engineSlot, typ string, state store.State, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, _, err := s.e.List(ctx, store.ListParams{Type: typ, States: []store.State{state}, Limit: 20})
	if err != nil || len(tasks) == 0 {
		if err != nil {
			c.opAnswer("list tasks", err)
		}
		return
	}
	id := tasks[rng.IntN(len(tasks))].ID
	_, err = s.e.Cancel(ctx, id)
	done, lost := c.opAnswer("cancel "+id, err)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.opsOn[id] = append(c.m.opsOn[id], time.Now())
	countAnswer(c.m.cancels, id, done, lost)
	if done || lost {
		c.mu.Lock()
		c.cancelled = append(c.cancelled, id)
		c.mu.Unlock()
	}
}

// retryCancelled retries a task the test cancelled.
func (c *opsCluster) retryCancelled(s *engineSlot, rng *rand.Rand) {
	c.mu.Lock()
	if len(c.cancelled) == 0 {
		c.mu.Unlock()
		return
	}
	j := rng.IntN(len(c.cancelled))
	id := c.cancelled[j]
	c.cancelled = append(c.cancelled[:j:j], c.cancelled[j+1:]...)
	c.mu.Unlock()
	c.retry(s, id)
}

// retryDead retries one of a few dead tasks.
func (c *opsCluster) retryDead(s *engineSlot, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead, _, err := s.e.ListDead(ctx, store.DeadFilter{Limit: 5})
	if err != nil || len(dead) == 0 {
		if err != nil {
			c.opAnswer("list dead", err)
		}
		return
	}
	c.retry(s, dead[rng.IntN(len(dead))].ID)
}

func (c *opsCluster) retry(s *engineSlot, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.m.mu.Lock()
	c.m.opsOn[id] = append(c.m.opsOn[id], time.Now())
	c.m.mu.Unlock()
	_, err := s.e.Retry(ctx, id)
	done, lost := c.opAnswer("retry "+id, err)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.opsOn[id] = append(c.m.opsOn[id], time.Now())
	countAnswer(c.m.retries, id, done, lost)
}

// countAnswer counts an operation on task id in counts: done in the
// first, lost (it may have committed) in the second. The model's mu is
// held.
func countAnswer(counts map[string][2]int, id string, done, lost bool) {
	n := counts[id]
	if done {
		n[0]++
	}
	if lost {
		n[1]++
	}
	counts[id] = n
}

// redrive redrives the dead tasks a filter selects.
func (c *opsCluster) redrive(s *engineSlot, f store.DeadFilter) {
	c.deadOp("redrive", "redriven", f, s.e.Redrive, &c.m.redrives)
}

// purge purges the dead tasks a filter selects.
func (c *opsCluster) purge(s *engineSlot, f store.DeadFilter) {
	c.deadOp("purge", "purged", f, s.e.Purge, &c.m.purges)
}

// deadOp runs a DLQ operation (op) with filter f and adds to counts the
// tasks it answered, and the most it may have changed when its answer was
// lost.
func (c *opsCluster) deadOp(op, done string, f store.DeadFilter, call func(context.Context, store.DeadFilter) (int, error), counts *[2]int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := call(ctx, f)
	_, lost := c.opAnswer(op, err)
	if n > f.Limit {
		c.t.Errorf("%s %+v: %d %s, over its limit", op, f, n, done)
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	counts[0] += n
	if lost {
		counts[1] += f.Limit - n
	}
}
