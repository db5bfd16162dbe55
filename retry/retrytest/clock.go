package retrytest

import (
	"context"
	"sync"
	"time"

	"github.com/retryq/retryq/retry"
)

// Clock is a fake retry.Clock. Make one with NewClock or NewAutoClock: the
// zero Clock is not ready for use. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	timers  []*timer
	changed chan struct{} // closed and replaced whenever a timer is added
}

// NewClock returns a clock standing at start. Its time moves only through
// [Clock.Advance]; timers fire when it passes their deadline.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// NewAutoClock returns a clock standing at start whose timers fire at once,
// moving the clock forward to their deadline: a retry loop runs without
// waiting while its clock still shows the delays it chose.
func NewAutoClock(start time.Time) *Clock {
	c := NewClock(start)
	c.auto = true
	return c
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock reaches Now()+d.
func (c *Clock) NewTimer(d time.Duration) retry.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if c.auto && d > 0 {
		c.now = t.at
	}
	if !t.at.After(c.now) {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d and fires every timer whose
// deadline has been reached. A negative d moves it back, as a wall clock
// stepped back does; no timer fires then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Waiters returns the number of timers that have neither fired nor been
// stopped.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending (so that a goroutine
// under test has started waiting), or ctx ends.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		pending, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if pending >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

type timer struct {
	clock *Clock
	at    time.Time
	ch    chan time.Time
}

// C returns the channel the timer fires on.
func (t *timer) C() <-chan time.Time { return t.ch }

// Stop removes a pending timer; it reports whether the timer was pending.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
