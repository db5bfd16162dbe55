package engine

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestPushRedirectLocationExcerptIsBounded: the history detail of a 3xx
// names its Location, which the target chooses. Like the body excerpt, it
// is cut to a bounded length: a target must not be able to make every
// attempt row (and every API answer that lists the history) tens of KiB.
func TestPushRedirectLocationExcerptIsBounded(t *testing.T) {
	backendtest.Run(t, testPushRedirectLocationExcerptIsBounded)
}

func testPushRedirectLocationExcerptIsBounded(t *testing.T, backend string) {
	location := "/moved/" + strings.Repeat("a", 40<<10)
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", location)
		w.WriteHeader(http.StatusFound)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.longredirect", fastPolicy(3), Target{URL: srv.URL})
	id := p.enqueue("push.longredirect", `{}`)
	tk := p.wait(id, store.StateDead)
	as := p.attempts(id)
	if tk.DeadReason != store.DeadNonRetryable || len(as) != 1 || as[0].Error == nil || as[0].Error.Code != "302" {
		t.Fatalf("dead %q, history %+v; want one permanent 302", tk.DeadReason, as)
	}
	d := as[0].Detail
	if !strings.HasPrefix(d, "HTTP 302 (redirect to /moved/aaa") || !strings.Contains(d, "not followed") {
		t.Errorf("detail = %.120q…, want it to name the start of the Location", d)
	}
	if len(d) > 2<<10 {
		t.Errorf("detail is %d bytes for a %d-byte Location, want at most 2 KiB", len(d), len(location))
	}
}

// TestPushRedirectLocationIsRedacted: a 3xx's Location is stored in the
// attempt's detail, which the API and the CLI show to anyone with read
// access. A redirect often carries a credential the target hands out (a
// presigned URL's signature, a login URL's token, an API key as user
// name): those parts are masked as in the target's own URL (RedactURL),
// and the rest still tells an operator where the target pointed.
func TestPushRedirectLocationIsRedacted(t *testing.T) {
	backendtest.Run(t, testPushRedirectLocationIsRedacted)
}

func testPushRedirectLocationIsRedacted(t *testing.T, backend string) {
	const secret = "s3cr3tSIG"
	locations := map[string]string{
		"/presigned": "https://bucket.example/obj?X-Amz-Credential=AKIA&X-Amz-Signature=" + secret,
		"/userinfo":  "https://user:pw-" + secret + "@api.example/v1",
		"/key":       "https://key-" + secret + "@api.example/v1",
		"/relative":  "/login?token=" + secret + "#frag-" + secret,
		"/bad":       "http://[::1%zz" + secret,
	}
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", locations[r.URL.Path])
		w.WriteHeader(http.StatusFound)
	})
	p := newPushEnvOn(t, backend, 0)
	for path, loc := range locations {
		typ := "push.redirect" + strings.ReplaceAll(path, "/", ".")
		p.putType(typ, fastPolicy(3), Target{URL: srv.URL + path})
		id := p.enqueue(typ, `{}`)
		tk := p.wait(id, store.StateDead)
		as := p.attempts(id)
		if tk.DeadReason != store.DeadNonRetryable || len(as) != 1 || as[0].Error == nil || as[0].Error.Code != "302" {
			t.Fatalf("%s: dead %q, history %+v; want one permanent 302", path, tk.DeadReason, as)
		}
		d := as[0].Detail
		if strings.Contains(d, secret) {
			t.Errorf("%s: detail %q shows the secret of Location %q", path, d, loc)
		}
		if !strings.Contains(d, "not followed") {
			t.Errorf("%s: detail %q does not say the redirect was not followed", path, d)
		}
		if path != "/bad" {
			want := RedactURL(loc, "xxxxx")
			if !strings.Contains(d, want) {
				t.Errorf("%s: detail %q, want it to name the Location as %q", path, d, want)
			}
		}
	}
}

// TestPushEndlessResponseHeadersAreCutShort: a target whose response
// headers never end (a broken proxy, a hostile endpoint) must not make a
// delivery read and hold megabytes of them (net/http's default allows
// 10 MiB per response, times the concurrency of every push type). The
// delivery gives up after a small bound, long before its timeout, and the
// failure is retried (class unknown), not final.
func TestPushEndlessResponseHeadersAreCutShort(t *testing.T) {
	backendtest.Run(t, testPushEndlessResponseHeadersAreCutShort)
}

func testPushEndlessResponseHeadersAreCutShort(t *testing.T, backend string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var written atomic.Int64
	served := make(chan struct{}, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		n, _ := io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		total := int64(n)
		line := "X-Padding: " + strings.Repeat("p", 1000) + "\r\n"
		for total < 64<<20 { // stops when the client hangs up
			n, err := io.WriteString(c, line)
			total += int64(n)
			if err != nil {
				break
			}
		}
		written.Store(total)
		served <- struct{}{}
	}()
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.headers", fastPolicy(1), Target{URL: "http://" + ln.Addr().String() + "/", TimeoutSeconds: 30})
	id := p.enqueue("push.headers", `{}`)
	tk := p.wait(id, store.StateDead)
	recvWithin(t, served, 10*time.Second, "the server to stop writing")
	as := p.attempts(id)
	if tk.DeadReason != store.DeadMaxAttempts || len(as) != 1 || as[0].Error == nil || as[0].Error.Class == "permanent" {
		t.Fatalf("dead %q, history %+v; want a retryable failure (dead only for max_attempts 1)", tk.DeadReason, as)
	}
	if d := as[0].FinishedAt.Sub(as[0].StartedAt); d > 10*time.Second {
		t.Errorf("the attempt lasted %v", d)
	}
	if n := written.Load(); n > 1<<20 {
		t.Errorf("the target wrote %d bytes of headers before the delivery gave up, want under 1 MiB", n)
	}
	t.Logf("the target wrote %d bytes of headers; error: %s", written.Load(), as[0].Error.Message)
}
