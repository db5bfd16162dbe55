package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// steppingClock is a Clock that stands still until step moves it.
type steppingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *steppingClock) step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// slowExtends is a store whose ExtendLeases calls each take slow on
// clock (a loaded database), extend every lease they are given, and record
// the Now each was sent with.
type slowExtends struct {
	store.Store
	clock *steppingClock
	slow  time.Duration
	mu    sync.Mutex
	calls []extendCall
}

// extendCall is what one ExtendLeases call was sent with, and when.
type extendCall struct {
	sent, now time.Time
	tasks     []string
}

func (s *slowExtends) ExtendLeases(_ context.Context, p store.ExtendParams) ([]error, error) {
	c := extendCall{sent: s.clock.Now(), now: p.Now}
	for _, l := range p.Leases {
		c.tasks = append(c.tasks, l.TaskID)
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	s.clock.step(s.slow)
	return make([]error, len(p.Leases)), nil
}

// TestHeartbeatBatchesEachOnTheirOwnTime: a heartbeat of more leases than
// one call carries sends its batches one after the other; each is sent
// with the time it is sent at, and extends its leases a whole lease from
// then. Before, every batch carried the time of the pass's start: behind
// slow earlier batches, a later batch's leases were extended by what was
// left of a lease counted from the start (nothing, after three batches of
// a third of the lease each: the watchdog stopped their handlers while
// they were being heartbeated), and the store judged whether they had
// expired by a time already past, extending leases that had expired
// meanwhile.
func TestHeartbeatBatchesEachOnTheirOwnTime(t *testing.T) {
	const lease = 30 * time.Second
	clock := &steppingClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := &slowExtends{Store: openWorkerStoreOn(t, "sqlite"), clock: clock, slow: lease / 4}
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease, NoScheduler: true, Clock: clock})
	const n = 3500 // four calls of at most 1,000
	for i := range n {
		id := fmt.Sprintf("task-%04d", i)
		e.leases.add(id, "lease-"+id, clock.Now().Add(lease))
	}
	if !e.heartbeat(context.Background(), time.Minute, false) {
		t.Fatal("heartbeat failed")
	}
	st.mu.Lock()
	calls := append([]extendCall(nil), st.calls...)
	st.mu.Unlock()
	if len(calls) != 4 {
		t.Fatalf("%d ExtendLeases calls, want 4", len(calls))
	}
	for k, c := range calls {
		if !c.now.Equal(c.sent) {
			t.Errorf("call %d sent at %v with Now %v (%v earlier)", k, c.sent, c.now, c.sent.Sub(c.now))
		}
		// Its leases are a whole lease ahead of the call.
		for _, id := range c.tasks {
			e.leases.mu.Lock()
			exp := e.leases.m[id].expires
			e.leases.mu.Unlock()
			if want := c.sent.Add(lease); !exp.Equal(want) {
				t.Errorf("call %d extended task %s to %v, want %v (a lease after it was sent)", k, id, exp, want)
				break
			}
		}
	}
}
