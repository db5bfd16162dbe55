package postgres

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy is a TCP proxy on 127.0.0.1 in front of a PostgreSQL server
// whose connections can be cut silently, the way a dropped network path or
// a crashed host cuts them: cut makes every connection open at that moment
// swallow whatever either side sends, without closing or resetting
// anything, so the peers wait for replies that never come. Connections
// made afterwards work normally.
type cutProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	pairs  []*proxyPair
	closed bool

	// replyCut, when set, cuts every connection as soon as the server sends
	// data containing one of its patterns, before that data reaches the
	// client (cutOnReply).
	replyCut atomic.Pointer[[][]byte]
}

type proxyPair struct {
	proxy          *cutProxy
	client, server net.Conn
	cut            atomic.Bool
	ended          atomic.Bool // a side closed or failed
}

// newCutProxy starts a proxy in front of the server of dbURL and returns it
// with dbURL rewritten to go through it. It stops when t ends.
func newCutProxy(t *testing.T, dbURL string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: u.Host}
	go p.serve()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pair := &proxyPair{proxy: p, client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.pairs = append(p.pairs, pair)
		p.mu.Unlock()
		go pair.pipe(s, c)
		go pair.pipe(c, s)
	}
}

// pipe copies src to dst until src fails; once the pair is cut it reads
// and drops everything, and leaves both ends open.
func (pp *proxyPair) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && src == pp.server {
			if pats := pp.proxy.replyCut.Load(); pats != nil {
				for _, pat := range *pats {
					if bytes.Contains(buf[:n], pat) {
						pp.proxy.replyCut.Store(nil)
						pp.proxy.cut()
						break
					}
				}
			}
		}
		if n > 0 && !pp.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			pp.ended.Store(true)
			if !pp.cut.Load() && errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

// cut silently cuts every connection open now and returns how many were
// still in use.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pair := range p.pairs {
		pair.cut.Store(true)
		if !pair.ended.Load() {
			n++
		}
	}
	return n
}

// cutOnReply makes the proxy cut every connection (as cut does) at the
// first reply from the server that contains one of patterns, which then
// never reaches the client: the server has run the statement, the client
// never hears of it, and the server's session waits for the client.
func (p *cutProxy) cutOnReply(patterns ...string) {
	bs := make([][]byte, len(patterns))
	for i, pat := range patterns {
		bs[i] = []byte(pat)
	}
	p.replyCut.Store(&bs)
}

// open returns how many connections through the proxy are in use.
func (p *cutProxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pair := range p.pairs {
		if !pair.ended.Load() {
			n++
		}
	}
	return n
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.closed = true
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, pair := range pairs {
		_ = pair.client.Close()
		_ = pair.server.Close()
	}
}
