package engine

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// rawTarget is a target answering each request by hand on the raw
// connection: answer writes what it likes and may block until stop closes
// (the end of the test). It returns the target's URL.
func rawTarget(t *testing.T, answer func(c net.Conn, stop <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(stop)
		_ = ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(c, stop)
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/"
}

// TestPushProtocolSwitchAnswerEndsAtTheTimeout: a target answering 101
// Switching Protocols (with Connection: Upgrade) hands the raw connection
// to the caller in net/http, whose reads no context bounds. The delivery
// must still end at its timeout, as a permanent failure "101", instead of
// reading the connection for as long as the target keeps it open (the
// task running forever, its lease heartbeated, its slot taken).
func TestPushProtocolSwitchAnswerEndsAtTheTimeout(t *testing.T) {
	backendtest.Run(t, testPushProtocolSwitchAnswerEndsAtTheTimeout)
}

func testPushProtocolSwitchAnswerEndsAtTheTimeout(t *testing.T, backend string) {
	url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhello")
		<-stop
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.upgrade", fastPolicy(3), Target{URL: url, TimeoutSeconds: 1})
	id := p.enqueue("push.upgrade", `{}`)
	tk := p.wait(id, store.StateDead)
	as := p.attempts(id)
	if tk.DeadReason != store.DeadNonRetryable || len(as) != 1 || as[0].Error == nil || as[0].Error.Code != "101" {
		t.Fatalf("dead %q, history %+v; want one permanent 101", tk.DeadReason, as)
	}
	if d := as[0].FinishedAt.Sub(as[0].StartedAt); d > 5*time.Second {
		t.Errorf("the attempt lasted %v with a 1 s timeout", d)
	}
}

// TestPushSlowBodyPastTheExcerptDoesNotHoldTheDelivery: once the status
// and the excerpt are in, the rest of the body is read only to reuse the
// connection. A target that answers 200 at once and then trickles a long
// body must not hold the delivery (and its slot of the type's concurrency)
// until the attempt's timeout: the delivery succeeds soon after the
// excerpt, and the connection is dropped instead.
func TestPushSlowBodyPastTheExcerptDoesNotHoldTheDelivery(t *testing.T) {
	backendtest.Run(t, testPushSlowBodyPastTheExcerptDoesNotHoldTheDelivery)
}

func testPushSlowBodyPastTheExcerptDoesNotHoldTheDelivery(t *testing.T, backend string) {
	url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
		_, _ = io.WriteString(c, strings.Repeat("a", 2000))
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 1000; i++ { // a byte every 50 ms, until the client hangs up
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(c, "a"); err != nil {
				return
			}
		}
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.trickle", fastPolicy(3), Target{URL: url, TimeoutSeconds: 6})
	id := p.enqueue("push.trickle", `{}`)
	tk := p.wait(id, store.StateSucceeded)
	as := p.attempts(id)
	if tk.Attempt != 1 || len(as) != 1 || as[0].Detail != "HTTP 200: "+strings.Repeat("a", pushBodyExcerpt)+" …[truncated]" {
		t.Fatalf("attempt %d, history %+v; want one success with the body's excerpt", tk.Attempt, as)
	}
	if d := as[0].FinishedAt.Sub(as[0].StartedAt); d > 3*time.Second {
		t.Errorf("the delivery lasted %v: it waited for the rest of a body it only reads to reuse the connection", d)
	}
}

// TestPushReusesTheConnectionAfterABodyPastTheExcerpt: a body a little
// longer than the excerpt is read to its end, so the next delivery to the
// target reuses the connection instead of dialling a new one. A body left
// unread closes the connection after every delivery. net/http also drops
// a connection whose writer has not reported its request written within
// 50 ms of the answer's end (a descheduled goroutine on a loaded machine),
// so the check is that the deliveries after the first did not all dial
// (wanting exactly one connection would fail on that alone).
func TestPushReusesTheConnectionAfterABodyPastTheExcerpt(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, strings.Repeat("b", 20<<10))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := newPushEnvOn(t, "sqlite", 0)
	p.putType("push.reuse", fastPolicy(1), Target{URL: srv.URL, Concurrency: 1})
	const deliveries = 4
	for range deliveries {
		p.wait(p.enqueue("push.reuse", `{}`), store.StateSucceeded)
	}
	if n := conns.Load(); n >= deliveries {
		t.Errorf("%d deliveries in turn opened %d connections: none reused the connection of the one before", deliveries, n)
	}
}

// TestPushStatusBelow100IsADeliveryError: net/http accepts any three
// digits as a status, "000" included, which reads as status 0: the value
// a delivery uses for "no response". A target answering so must fail the
// delivery like any other broken answer (class unknown, retried), not
// crash the node on a transport error that is not there.
func TestPushStatusBelow100IsADeliveryError(t *testing.T) {
	backendtest.Run(t, testPushStatusBelow100IsADeliveryError)
}

func testPushStatusBelow100IsADeliveryError(t *testing.T, backend string) {
	url := rawTarget(t, func(c net.Conn, _ <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 000 Nothing\r\nContent-Length: 2\r\n\r\nno")
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.zero", fastPolicy(2), Target{URL: url})
	id := p.enqueue("push.zero", `{}`)
	tk := p.wait(id, store.StateDead)
	as := p.attempts(id)
	if tk.DeadReason != store.DeadMaxAttempts || len(as) != 2 {
		t.Fatalf("dead %q after %d attempts; want dead for max_attempts after 2 (history %+v)", tk.DeadReason, len(as), as)
	}
	for _, a := range as {
		if a.Error == nil || a.Error.Code != CodeDeliveryError || a.Error.Class != "unknown" || !strings.Contains(a.Error.Message, "000") {
			t.Errorf("attempt %d: error %+v, want %s (unknown) naming the status", a.Number, a.Error, CodeDeliveryError)
		}
	}
}
