//go:build unix

package cli

import (
	"errors"
	"net"
	"testing"
	"time"
)

// acceptAsync calls l.Accept in a goroutine; the result arrives on the
// returned channel.
func acceptAsync(l *limitListener) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept()
		ch <- acceptResult{c, err}
	}()
	return ch
}

type acceptResult struct {
	c   net.Conn
	err error
}

// notAccepted checks that no Accept result arrives on ch within a short
// wait and that the listener has accepted want connections. On a loaded
// machine the wait may be too short to see a wrong accept, never too short
// to pass a right one.
func notAccepted(t *testing.T, l *limitListener, ch <-chan acceptResult, want int64) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Accept returned (%v, %v) while the listener was at its cap", r.c, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := l.accepted.Load(); n != want {
		t.Fatalf("the listener accepted %d connections, want %d", n, want)
	}
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func listenLimited(t *testing.T, max int) *limitListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(ln, max)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLimitListenerWaitsAtTheCap: at its cap the listener accepts nothing
// more (the client waits in the kernel's queue) until an accepted
// connection is closed; closing one twice frees one slot, not two.
func TestLimitListenerWaitsAtTheCap(t *testing.T) {
	l := listenLimited(t, 2)
	addr := l.Addr().String()
	var conns []net.Conn
	for range 2 {
		dialT(t, addr)
		r := recvValue(t, acceptAsync(l), waitLimit, "an accept under the cap")
		if r.err != nil {
			t.Fatal(r.err)
		}
		conns = append(conns, r.c)
	}
	dialT(t, addr)
	third := acceptAsync(l)
	notAccepted(t, l, third, 2)
	// Closed twice: one slot freed.
	for range 2 {
		done := make(chan error, 1)
		go func() { done <- conns[0].Close() }()
		recvValue(t, done, waitLimit, "a connection's Close")
	}
	r := recvValue(t, third, waitLimit, "the accept a freed slot allows")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	dialT(t, addr)
	fourth := acceptAsync(l)
	notAccepted(t, l, fourth, 3)
	conns[1].Close()
	r = recvValue(t, fourth, waitLimit, "the accept the second freed slot allows")
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.c.Close()
}

// TestLimitListenerCloseEndsAWaitingAccept: an Accept waiting for a slot
// returns an error wrapping net.ErrClosed when the listener is closed, as
// one waiting for a connection does, so that the server's accept loop
// ends.
func TestLimitListenerCloseEndsAWaitingAccept(t *testing.T) {
	for _, atCap := range []bool{true, false} {
		l := listenLimited(t, 1)
		if atCap {
			dialT(t, l.Addr().String())
			r := recvValue(t, acceptAsync(l), waitLimit, "the first accept")
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.c.Close()
		}
		waiting := acceptAsync(l)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		r := recvValue(t, waiting, waitLimit, "the waiting Accept to end at Close")
		if !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("at cap %v: Accept after Close: (%v, %v), want an error wrapping net.ErrClosed", atCap, r.c, r.err)
		}
		if r := recvValue(t, acceptAsync(l), waitLimit, "an Accept after Close"); !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("at cap %v: Accept after Close: (%v, %v), want an error wrapping net.ErrClosed", atCap, r.c, r.err)
		}
		if err := l.Close(); err == nil {
			t.Errorf("at cap %v: a second Close returned nil, want the listener's error", atCap)
		}
	}
}

// TestConnectionsDefault: the default cap is the smaller of 4096 and half
// the descriptor limit, at least 1, and 4096 when the limit is unknown.
func TestConnectionsDefault(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{0, 4096}, {1, 1}, {2, 1}, {64, 32}, {1024, 512}, {8192, 4096}, {1 << 20, 4096}, {^uint64(0), 4096}} {
		if got := connectionsDefault(c.nofile); got != c.want {
			t.Errorf("connectionsDefault(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}
