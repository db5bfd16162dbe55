package multinode

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// freezeProxy forwards TCP connections to a PostgreSQL server on
// 127.0.0.1 and can freeze them: while frozen it forwards nothing in either
// direction (the bytes wait, no connection is reset), as a network path
// that silently drops packets, a stopped process or a frozen VM would.
// Thawed, it forwards what waited.
type freezeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, thawed: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.thawed)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// proxied returns the database URL raw with its host replaced by p's.
func (p *freezeProxy) proxied(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

func (p *freezeProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed, closed := p.thawed, p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			<-thawed // close thaws
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the deferred closes end the other direction too
		}
	}
}

// freeze stops forwarding until thaw.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

// thaw forwards again, what waited first.
func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

func (p *freezeProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
