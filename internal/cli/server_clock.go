package cli

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// serverClock is a server's clock as the Date headers of its answers tell
// it, so that ages ("5m ago") and durations ago (--since 1h) are judged on
// the clock the server stamps tasks with, not on this machine's, which may
// be off. Its zero value knows nothing and reads this machine's clock.
type serverClock struct {
	mu    sync.Mutex
	known bool
	at    time.Time // the server's time when the answer came (no monotonic reading)
	got   time.Time // this machine's time then, with its monotonic reading
}

// observe records the Date header of an answer received at got for a
// request sent at sent (both read from this machine's clock). The server
// wrote the header between the two, to the second, rounded down: its time
// at got lies between the header and the header plus a second plus the
// round trip. A local clock within that range is taken as it is (it is
// finer than the header); one outside it is moved to the nearest end.
func (c *serverClock) observe(date string, sent, got time.Time) {
	d, err := http.ParseTime(date)
	if date == "" || err != nil {
		return
	}
	local := got.Round(0) // the wall clock only
	at := local
	if hi := d.Add(time.Second + got.Sub(sent)); at.After(hi) {
		at = hi
	}
	if at.Before(d) {
		at = d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known, c.at, c.got = true, at, got
}

// now is the server's time now: the time of its last answer plus the time
// elapsed since on this machine's monotonic clock, or this machine's time
// when no answer told it.
func (c *serverClock) now() time.Time {
	if c == nil {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return time.Now()
	}
	return c.at.Add(time.Since(c.got))
}

// syncClock asks the server for the time (one GET /healthz, whose answer
// carries a Date header like every other) before a command turns a
// duration ago into a time to send. A server that cannot be reached is an
// error; any answer, an error answer too, tells the time.
func (c *apiClient) syncClock(ctx context.Context) error {
	_, err := c.call(ctx, "GET", "/healthz", nil, nil, nil)
	var ue *unreachableError
	if errors.As(err, &ue) {
		return err
	}
	return nil
}

// now is the server's time now, as its answers told it (serverClock.now).
func (c *apiClient) now() time.Time { return c.clock.now() }
