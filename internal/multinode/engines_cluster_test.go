package multinode

// The engines of TestEnginesRestartedAtRandom and what the test does to
// them: open, close and restart, cut and freeze their connections, cancel
// and retry tasks, run the pull workers, watch the leadership.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

const mnSlots = 4 // engines at once

// mnCluster is the test's engines on one database. mu (engineSet's)
// guards rng and frozenUntil too.
type mnCluster struct {
	engineSet
	t     *testing.T
	url   string
	admin *postgres.Store // the test's own pool
	rng   *rand.Rand      // under mu
	log   *slog.Logger    // the engines' logs (RETRYQ_MULTINODE_LOG)
	m     *mnModel
	// proxies[i] carries slot i's connections; frozenUntil[i] (under mu)
	// is when the test thaws it (zero: not frozen).
	proxies     [mnSlots]*freezeProxy
	frozenUntil [mnSlots]time.Time
	// leader monitor
	monMu      sync.Mutex
	monErrs    []string
	takeovers  []time.Duration
	leaderSeen int
}

func (c *mnCluster) open(i int) {
	c.t.Helper()
	node := fmt.Sprintf("node-%d-g%d", i, c.nextGen())
	c.put(i, openSlot(c.t, node, slotSpec{
		url: c.proxies[i].proxied(c.t, c.url),
		engine: engine.Config{LeaseDuration: mnLease, PollInterval: 100 * time.Millisecond, LeaderTTL: mnLeaderTTL,
			DefaultPolicy: mnPolicy(), Logger: c.log.With("node", node)},
		worker: engine.WorkerConfig{Types: []string{mnTypeLocal}, Concurrency: 4, ShutdownGrace: mnGrace,
			Handle: func(hctx context.Context, t *store.Task) error {
				r := c.m.begin(hctx, node, false, t)
				defer c.m.end(r, nil) // also when the handler panics
				return handlerError(hctx, r.action)
			}},
		pulls: 1,
		pull:  c.pullLoop,
	}))
}

// pullLoop leases pull tasks and reports each as its script says until
// ctx ends.
func (c *mnCluster) pullLoop(ctx context.Context, s *engineSlot) {
	req := engine.LeaseRequest{Types: []string{mnTypePull}, Max: 1, Wait: 200 * time.Millisecond, LeaseDuration: mnPullLease}
	s.pullLoop(ctx, c.t, req, func(tasks []store.Task) {
		for j := range tasks {
			if c.m.actionOf(&tasks[j]) == mnAbandon {
				// Abandoned leases wait beside the loop, so that they do
				// not hold up the other pull tasks.
				s.done.Add(1)
				go func(t *store.Task) {
					defer s.done.Done()
					c.pullRun(ctx, s, t)
				}(&tasks[j])
				continue
			}
			c.pullRun(ctx, s, &tasks[j])
		}
	})
}

func (c *mnCluster) pullRun(ctx context.Context, s *engineSlot, t *store.Task) {
	r := c.m.begin(context.Background(), s.node, true, t) // no handler context to watch
	tok := engine.LeaseToken(t)
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch r.action {
	case mnOK:
		c.m.reports(r)
		err = c.reporter(s).Complete(rctx, t.ID, tok)
	case mnBeat:
		err = c.beatThenComplete(ctx, rctx, s, t)
	case mnAbandon:
		// Hold the lease past its expiry without a heartbeat, then try to
		// complete: the store must refuse it.
		timer := time.NewTimer(2 * mnPullLease)
		select {
		case <-timer.C:
			err = s.e.Complete(rctx, t.ID, tok)
			if err == nil {
				c.m.mu.Lock()
				c.m.violate("task %s attempt %d: completion %s after the pull lease expired at %s was accepted",
					t.ID, t.Attempt, time.Now().Format(time.StampMicro), t.LeaseExpiresAt.Format(time.StampMicro))
				c.m.mu.Unlock()
			}
		case <-ctx.Done():
			timer.Stop()
			err = errors.New("abandoned at close")
		}
	default:
		yes, no := true, false
		rep := engine.ReportedError{Code: "scripted", Message: "scripted " + r.action, Retryable: &yes}
		switch r.action {
		case mnPerm:
			rep.Retryable = &no
		case mnAfter:
			rep.RetryAfter = mnRetryAfter
		}
		c.m.reports(r)
		_, err = c.reporter(s).Fail(rctx, t.ID, tok, rep)
	}
	c.m.end(r, err)
}

// reporter returns the engine a pull worker reports to: its own or,
// half the time, another live one (a token is good on any node). While
// the last engines close none is live: then its own.
func (c *mnCluster) reporter(s *engineSlot) *engine.Engine {
	live := c.thawed()
	if len(live) == 0 {
		return s.e
	}
	c.mu.Lock()
	pick := c.rng.IntN(2 * len(live))
	c.mu.Unlock()
	if pick < len(live) {
		return live[pick].e
	}
	return s.e
}

// beatThenComplete heartbeats a pull lease through random nodes three
// times, each extending it by mnPullLease well before it expires, then
// completes it; a lease kept alive that way must not be reaped nor the
// completion refused.
func (c *mnCluster) beatThenComplete(ctx, rctx context.Context, s *engineSlot, t *store.Task) error {
	tok := engine.LeaseToken(t)
	expires := t.LeaseExpiresAt
	for i := 0; i < 3; i++ {
		sleepCtx(ctx, mnPullLease/3)
		var err error
		var exp time.Time
		for try := 0; try < 5; try++ {
			if exp, err = c.reporter(s).Heartbeat(rctx, tok, mnPullLease); !unavailable(err) && !errors.Is(err, engine.ErrClosed) {
				break
			}
		}
		if err != nil {
			return err // lost: checked below only when no beat failed
		}
		expires = exp
	}
	rep := c.reporter(s)
	err := rep.Complete(rctx, t.ID, tok)
	// Refused before the lease's expiry, it was refused wrongly. (Sent
	// before it but answered after, it may have been checked late.)
	if sent := time.Now(); errors.Is(err, store.ErrLeaseLost) && sent.Before(expires.Add(-50*time.Millisecond)) {
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hist, _ := c.admin.ListAttempts(hctx, t.ID)
		cur, _ := c.admin.GetTask(hctx, t.ID)
		cancel()
		c.m.mu.Lock()
		c.m.violate("task %s attempt %d: completion at %s on %s (offset %s) refused (%v) although a heartbeat extended the lease to %s; history %s; now lease %s until %s, ours %s",
			t.ID, t.Attempt, sent.Format(time.StampMicro), rep.NodeID(), rep.ClockOffset(), err, expires.Format(time.StampMicro), histString(hist),
			cur.LeaseID, cur.LeaseExpiresAt.Local().Format(time.StampMicro), t.LeaseID)
		c.m.mu.Unlock()
	}
	return err
}

// cut terminates every server session of a node (its pool and its
// listener), as a dropped network path or a server-side kill would.
func (c *mnCluster) cut(s *engineSlot) {
	c.m.markCut(s.node)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.admin.Pool().Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", s.node)
	if err != nil {
		c.t.Errorf("cut %s: %v", s.node, err)
	}
}

// close closes slot i's engine and store, after its workers stopped.
func (c *mnCluster) close(i int) {
	s := c.take(i)
	if s == nil {
		return
	}
	c.m.markClosing(s.node)
	s.stop()
}

// thawed returns the live engines whose connections are not frozen.
func (c *mnCluster) thawed() []*engineSlot {
	return c.liveWhere(func(i int) bool { return c.frozenUntil[i].IsZero() })
}

// freeze freezes slot i's connections for d (thawDue thaws them).
func (c *mnCluster) freeze(i int, d time.Duration) {
	c.mu.Lock()
	c.frozenUntil[i] = time.Now().Add(d)
	node := c.slots[i].node
	c.mu.Unlock()
	c.m.markCut(node)
	c.proxies[i].freeze()
}

// thawDue thaws the frozen slots whose time came, or all of them.
func (c *mnCluster) thawDue(all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, until := range c.frozenUntil {
		if !until.IsZero() && (all || time.Now().After(until)) {
			c.frozenUntil[i] = time.Time{}
			c.proxies[i].thaw()
			if s := c.slots[i]; s != nil {
				c.m.markCut(s.node)
			}
		}
	}
}

// monitor checks, every 2 ms until stop, that at most one engine believes
// itself leader.
func (c *mnCluster) monitor(stop <-chan struct{}) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for n := 0; n < 10_000_000; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var leaders []string
		for _, s := range c.live() {
			if s.e.IsLeader() {
				leaders = append(leaders, s.node)
			}
		}
		if len(leaders) > 1 {
			c.monMu.Lock()
			if len(c.monErrs) < 10 {
				c.monErrs = append(c.monErrs, fmt.Sprintf("%s: %d engines believe they lead: %v", time.Now().Format(time.StampMicro), len(leaders), leaders))
			}
			c.monMu.Unlock()
		}
		if len(leaders) == 1 {
			c.monMu.Lock()
			c.leaderSeen++
			c.monMu.Unlock()
		}
	}
}

func mnPolicy() retry.Policy {
	return retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: mnDelay, MaxDelay: mnMaxDelay, Jitter: retry.JitterNone,
		MaxAttempts: mnMaxAttempts}
}

// restart closes an engine (the leader if one leads and the coin says so)
// and opens a new one in its place; when it closed the leader, another
// engine must lead within mnTakeoverWait: a lease left behind runs out
// and the next attempt takes it, plus 5 s of slack for a loaded 2-core
// machine under -race, where a standby's attempts, each cut off after
// TTL/4, can time out several in a row (1 s of slack failed there). A
// stalled election still fails it.
func (c *mnCluster) restart(rng *rand.Rand, live []*engineSlot) {
	i := rng.IntN(mnSlots)
	wasLeader := false
	c.mu.Lock()
	if rng.IntN(2) == 0 {
		for j, s := range c.slots {
			if s != nil && s.e.IsLeader() && c.frozenUntil[j].IsZero() {
				i, wasLeader = j, true
			}
		}
	}
	frozen := !c.frozenUntil[i].IsZero()
	c.mu.Unlock()
	if frozen {
		return // its Close would wait for the thaw
	}
	c.close(i)
	if wasLeader {
		closed := time.Now()
		for {
			led := false
			for _, s := range c.live() {
				led = led || s.e.IsLeader()
			}
			if led {
				c.monMu.Lock()
				c.takeovers = append(c.takeovers, time.Since(closed))
				c.monMu.Unlock()
				break
			}
			if time.Since(closed) > mnTakeoverWait {
				c.t.Errorf("no engine led within %s of the leader's close", mnTakeoverWait)
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	c.open(i)
}

func (c *mnCluster) cancelTask(s *engineSlot, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for try := 0; try < 5; try++ {
		if _, err = s.e.Cancel(ctx, id); !unavailable(err) {
			break
		}
		// Cut off: did it commit? Only the test cancels.
		if c.stateOf(id) == store.StateCancelled {
			err = nil
			break
		}
	}
	if errors.Is(err, store.ErrConflict) || errors.Is(err, engine.ErrClosed) {
		return
	}
	if err != nil {
		c.t.Errorf("cancel %s: %v", id, err)
		return
	}
	c.m.mu.Lock()
	c.m.cancelled[id], c.m.touched[id] = true, true
	c.m.touchedAt[id] = time.Now()
	c.m.cancelList = append(c.m.cancelList, id)
	c.m.mu.Unlock()
}

// stateOf reads a task's state through the test's own pool.
func (c *mnCluster) stateOf(id string) store.State {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := c.admin.GetTask(ctx, id)
	if err != nil {
		c.t.Errorf("get task %s: %v", id, err)
	}
	return t.State
}

// retryCancelled retries a task the test cancelled.
func (c *mnCluster) retryCancelled(s *engineSlot, rng *rand.Rand) {
	c.m.mu.Lock()
	var id string
	for len(c.m.cancelList) > 0 && id == "" {
		j := rng.IntN(len(c.m.cancelList))
		cand := c.m.cancelList[j]
		c.m.cancelList = append(c.m.cancelList[:j:j], c.m.cancelList[j+1:]...)
		if c.m.cancelled[cand] {
			id = cand
		}
	}
	if id == "" {
		c.m.mu.Unlock()
		return
	}
	c.m.epoch[id]++
	c.m.cancelled[id] = false
	c.m.touchedAt[id] = time.Now()
	c.m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for try := 0; try < 5; try++ {
		if _, err = s.e.Retry(ctx, id); !unavailable(err) {
			break
		}
		if c.stateOf(id) != store.StateCancelled {
			err = nil // it committed
			break
		}
	}
	if err != nil {
		c.t.Errorf("retry cancelled task %s: %v", id, err)
	}
}

// redriveDead redrives up to three dead tasks by id.
func (c *mnCluster) redriveDead(s *engineSlot) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead, _, err := s.e.ListDead(ctx, store.DeadFilter{Limit: 3})
	if err != nil {
		if !errors.Is(err, engine.ErrClosed) && !unavailable(err) {
			c.t.Errorf("list dead: %v", err)
		}
		return
	}
	if len(dead) == 0 {
		return
	}
	ids := make([]string, len(dead))
	c.m.mu.Lock()
	for i, d := range dead {
		ids[i] = d.ID
		c.m.epoch[d.ID]++
		c.m.touched[d.ID] = true
		c.m.touchedAt[d.ID] = time.Now()
		c.m.deadRetry++
	}
	c.m.mu.Unlock()
	for try := 0; try < 5; try++ {
		n, err := s.e.Redrive(ctx, store.DeadFilter{IDs: ids})
		if unavailable(err) {
			// Cut off: redrive again those still dead.
			var left []string
			for _, id := range ids {
				if c.stateOf(id) == store.StateDead {
					left = append(left, id)
				}
			}
			if ids = left; len(ids) > 0 {
				continue
			}
			return
		}
		if err != nil || n != len(ids) {
			c.t.Errorf("redrive %v: %d redriven, err %v; want %d", ids, n, err, len(ids))
		}
		return
	}
	c.t.Errorf("redrive %v: unavailable 5 times", ids)
}
