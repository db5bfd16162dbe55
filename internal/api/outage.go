package api

import "sync/atomic"

// outage remembers whether a component is in an outage, so that it logs
// the outage once: a warning when it starts, an Info line when it ends,
// and the failures in between at Debug. Without it, a client retrying and
// a load balancer probing wrote a line per request for as long as the
// database was away.
type outage struct{ down atomic.Bool }

// fail records a failure and reports whether it starts an outage.
func (o *outage) fail() bool { return o.down.CompareAndSwap(false, true) }

// ok records a success and reports whether it ends an outage.
func (o *outage) ok() bool { return o.down.Load() && o.down.CompareAndSwap(true, false) }
