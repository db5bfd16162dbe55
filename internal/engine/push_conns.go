package engine

import (
	"net/http"
	"sync/atomic"
)

// pushConns are the connections of one push target: each target has an
// HTTP transport of its own, shared by the values of the target that
// keep its URL (a changed timeout or header keeps the connections), so
// that the connections to a target changed to another URL, or removed,
// can be closed without touching the other targets'. Their idle
// keep-alive connections are closed when the target is retired and again
// when its last delivery returns: left to the transport, each stayed open
// for its idle timeout (90 s) after every change of a target.
type pushConns struct {
	client  *http.Client
	live    atomic.Int64 // deliveries using client
	retired atomic.Bool  // the target was changed to another URL or removed
}

func newPushConns() *pushConns { return &pushConns{client: newPushClient()} }

// acquire counts a delivery about to use c; release must follow.
func (c *pushConns) acquire() { c.live.Add(1) }

// release counts a delivery done with c (its response body closed): the
// last one of a retired target closes the connections it left idle.
func (c *pushConns) release() {
	if c.live.Add(-1) == 0 && c.retired.Load() {
		c.client.CloseIdleConnections()
	}
}

// retire closes c's idle connections: its target is no longer configured.
// Those of deliveries still in flight close when the last returns
// (release). Until a delivery acquires c again, the transport closes a
// connection as soon as it is idle.
func (c *pushConns) retire() {
	c.retired.Store(true)
	c.client.CloseIdleConnections()
}
