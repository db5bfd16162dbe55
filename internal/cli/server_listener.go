package cli

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Bounds of --max-connections. The default is the smaller of
// defaultMaxConnections and half the process's file descriptor limit
// (see connectionsDefault).
const (
	defaultMaxConnections = 4096
	maxMaxConnections     = 1 << 20
)

// connectionsDefault is --max-connections when it is not given: the
// smaller of defaultMaxConnections and half of nofile, the process's file
// descriptor limit (its soft limit, which the Go runtime raised to the
// hard one at start), and at least 1. The other half is left to what the
// node must still open when its clients hold every connection it allows:
// the database's connections and files, push deliveries' connections, its
// log. defaultMaxConnections is 8 times engine.DefaultMaxLongPolls, so that
// waiting long polls never hold more than a small share of the connections.
// nofile is 0 when the limit is unknown or unlimited.
func connectionsDefault(nofile uint64) int {
	if nofile == 0 || nofile/2 >= defaultMaxConnections {
		return defaultMaxConnections
	}
	return max(int(nofile/2), 1)
}

// limitListener accepts at most max connections open at once. At the cap
// Accept waits, without accepting, until a connection it returned is
// closed, so that further clients wait in the kernel's accept queue
// rather than be accepted and dropped, and the process's file descriptors
// are not all spent on clients.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one value per open connection
	closed    chan struct{}
	closeOnce sync.Once
	accepted  atomic.Int64 // connections accepted so far, for tests
}

// newLimitListener caps ln at max open connections; max must be positive.
func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection. A Close while it
// waits ends the wait with an error wrapping net.ErrClosed.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.accepted.Add(1)
	return &limitedConn{Conn: c, l: l}, nil
}

// Close closes the listener and ends the waits of Accept calls. The
// connections already accepted stay open.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitedConn is a connection of a limitListener; closing it frees its
// slot, once however often it is closed.
type limitedConn struct {
	net.Conn
	l        *limitListener
	released sync.Once
}

// Close closes the connection and frees its slot the first time.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.released.Do(func() { <-c.l.slots })
	return err
}

// CloseWrite shuts down the writing side of the connection when the
// underlying connection can (a TCP connection): net/http does so before it
// closes a connection after an answer whose request it did not read whole,
// so that the client receives that answer rather than a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
