package engine

import (
	"context"
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

// locationHider is a push client's transport: it takes a 3xx response's
// Location out of the response before http.Client sees it, into the
// string that withLocationSlot put in the request's context. The client
// parses a 301, 302 or 303's Location before it asks CheckRedirect
// whether to follow it, so a Location it could not parse failed the
// delivery as if no response had come (retried as unknown instead of the
// permanent failure a redirect is), with an error quoting the Location
// whole into the history, its credentials included.
type locationHider struct{ tr *http.Transport }

// locationSlot is the context key of the string a delivery's 3xx
// Location is put in.
type locationSlot struct{}

// withLocationSlot returns ctx carrying slot, which a 3xx response's
// Location is stored in by the push client.
func withLocationSlot(ctx context.Context, slot *string) context.Context {
	return context.WithValue(ctx, locationSlot{}, slot)
}

// RoundTrip sends req. http.Client calls it in the caller's goroutine,
// so writing the request's slot needs no lock.
func (h locationHider) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.tr.RoundTrip(req)
	if err == nil && resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		if slot, ok := req.Context().Value(locationSlot{}).(*string); ok {
			*slot = resp.Header.Get("Location")
		}
		resp.Header.Del("Location")
	}
	return resp, err
}

// CloseIdleConnections closes the transport's idle connections (called
// through http.Client.CloseIdleConnections).
func (h locationHider) CloseIdleConnections() { h.tr.CloseIdleConnections() }
