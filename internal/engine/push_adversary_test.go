package engine

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/store"
)

// TestPushAgainstMisbehavingTargets runs deliveries against downstreams
// that misbehave on purpose, one behaviour per subtest, on one engine: each
// delivery must end as docs/api.md's push section says, within its
// timeout, with a bounded error in its history.
func TestPushAgainstMisbehavingTargets(t *testing.T) {
	ctx := context.Background()
	p := newLeakCheckedPushEnv(t)
	var types []string
	newType := func() string {
		types = append(types, fmt.Sprintf("push.adv%d", len(types)+1))
		return types[len(types)-1]
	}
	// deliver puts a type with tg and the policy, enqueues one task and
	// waits for it to end; it returns the task and its history.
	deliver := func(t *testing.T, attempts int, tg Target) (store.Task, []store.Attempt) {
		t.Helper()
		typ := newType()
		p.putType(typ, fastPolicy(attempts), tg)
		id := p.enqueue(typ, `{}`)
		tk := p.wait(id, store.StateSucceeded, store.StateDead)
		return tk, p.attempts(id)
	}
	lasted := func(a store.Attempt) time.Duration { return a.FinishedAt.Sub(a.StartedAt) }

	// Statuses as the table of docs/api.md classifies them.
	t.Run("statuses", func(t *testing.T) {
		srv := target(t, func(w http.ResponseWriter, r *http.Request) {
			var code int
			_, _ = fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
			w.WriteHeader(code)
			if code != http.StatusNoContent {
				_, _ = io.WriteString(w, `{"error":"nope"}`)
			}
		})
		cases := []struct {
			status int
			state  store.State
			class  string
		}{
			{200, store.StateSucceeded, ""}, // a body saying error is still a 2xx
			{204, store.StateSucceeded, ""},
			{404, store.StateDead, "permanent"},
			{410, store.StateDead, "permanent"},
			{501, store.StateDead, "permanent"},
			{408, store.StateDead, "transient"}, // retried up to max attempts 2
			{425, store.StateDead, "transient"},
			{505, store.StateDead, "transient"},
		}
		for _, c := range cases {
			tk, as := deliver(t, 2, Target{URL: fmt.Sprintf("%s/%d", srv.URL, c.status)})
			if tk.State != c.state {
				t.Errorf("%d: state %s, want %s (history %+v)", c.status, tk.State, c.state, as)
				continue
			}
			if c.class == "" {
				continue
			}
			want := store.DeadNonRetryable
			if c.class == "transient" {
				want = store.DeadMaxAttempts
			}
			if e := as[0].Error; tk.DeadReason != want || e == nil || e.Code != fmt.Sprint(c.status) || e.Class != c.class {
				t.Errorf("%d: dead %q, first error %+v; want %s, code %d class %s", c.status, tk.DeadReason, e, want, c.status, c.class)
			}
		}
	})

	// Taken once the store's readers are open: every target's connections
	// and goroutines must be gone when the subtests end and the targets
	// are removed (each type with a target has a fetcher).
	removeTargets := func() {
		for _, typ := range types {
			if _, err := p.e.PutType(ctx, TypeSpec{Type: typ, Policy: fastPolicy(1)}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the fetchers to stop", func() bool {
			s := p.e.pushTypes()
			return s == nil || len(s.types) == 0
		})
	}
	removeTargets()
	openReader(t, p.e)
	base := leakcheck.Take(t)

	// Headers, then a body that never comes (or comes a byte at a time):
	// the delivery's timeout covers the body's read. The timeout (2 s)
	// leaves a loaded machine time to send the request and get the
	// headers, which the target sends once it read it: with 0.5 s, a
	// delivery whose headers came later timed out with no response.
	t.Run("stalled body", func(t *testing.T) {
		for _, status := range []int{200, 503} {
			url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
				fmt.Fprintf(c, "HTTP/1.1 %d X\r\nContent-Length: 1000\r\n\r\npart", status)
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := io.WriteString(c, "."); err != nil {
						return
					}
				}
			})
			tk, as := deliver(t, 1, Target{URL: url, TimeoutSeconds: 2})
			if tk.Attempt != 1 || len(as) != 1 || !strings.HasPrefix(as[0].Detail, fmt.Sprintf("HTTP %d: part", status)) {
				t.Errorf("%d: attempt %d, history %+v; want one attempt with the body read so far", status, tk.Attempt, as)
				continue
			}
			// The body would take 100 s to come whole.
			if d := lasted(as[0]); d > 6*time.Second {
				t.Errorf("%d: the attempt lasted %v with a 2 s timeout", status, d)
			}
			if want := map[int]store.State{200: store.StateSucceeded, 503: store.StateDead}[status]; tk.State != want {
				t.Errorf("%d: %s, want %s: the status decides", status, tk.State, want)
			}
			if status == 503 && (as[0].Error == nil || as[0].Error.Code != "503" || as[0].Error.Class != "transient") {
				t.Errorf("503: error %+v, want 503 transient", as[0].Error)
			}
		}
	})

	// A 100 MiB body: the node reads the excerpt and a bounded drain, not
	// the whole body, and keeps a bounded detail.
	t.Run("huge body", func(t *testing.T) {
		var sent atomic.Int64
		url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
			fmt.Fprintf(c, "HTTP/1.1 500 X\r\nContent-Length: %d\r\n\r\n", 100<<20)
			chunk := []byte(strings.Repeat("z", 64<<10))
			for i := 0; i < 1600; i++ {
				n, err := c.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tk, as := deliver(t, 1, Target{URL: url, TimeoutSeconds: 5})
		runtime.ReadMemStats(&after)
		if tk.DeadReason != store.DeadMaxAttempts || len(as) != 1 || as[0].Error == nil || as[0].Error.Code != "500" {
			t.Fatalf("dead %q, history %+v; want one 500", tk.DeadReason, as)
		}
		if n := len(as[0].Detail); n > 2<<10 {
			t.Errorf("detail is %d bytes, want the 1 KiB excerpt", n)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
			t.Errorf("the node allocated %d MiB for one delivery of a 100 MiB body", alloc>>20)
		}
		if n := sent.Load(); n > 40<<20 {
			t.Errorf("the target could send %d MiB before the node hung up", n>>20)
		}
	})

	// Redirects: to itself, to another port, to another scheme; never
	// followed, each a permanent failure naming the Location.
	t.Run("redirects", func(t *testing.T) {
		var elsewhere atomic.Int32
		other := target(t, func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) })
		var srvURL string
		srv := target(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/self":
				http.Redirect(w, r, "/self", http.StatusMovedPermanently)
			case "/loop":
				http.Redirect(w, r, srvURL+"/loop", http.StatusTemporaryRedirect)
			case "/port":
				http.Redirect(w, r, other.URL+"/", http.StatusPermanentRedirect)
			case "/scheme":
				http.Redirect(w, r, strings.Replace(other.URL, "http:", "https:", 1), http.StatusSeeOther)
			}
		})
		srvURL = srv.URL
		for path, code := range map[string]string{"/self": "301", "/loop": "307", "/port": "308", "/scheme": "303"} {
			tk, as := deliver(t, 3, Target{URL: srv.URL + path})
			if tk.DeadReason != store.DeadNonRetryable || len(as) != 1 || as[0].Error == nil || as[0].Error.Code != code ||
				!strings.Contains(as[0].Detail, "not followed") {
				t.Errorf("%s: dead %q, history %+v; want one permanent %s naming the Location", path, tk.DeadReason, as, code)
			}
		}
		if n := elsewhere.Load(); n != 0 {
			t.Errorf("another server got %d requests through redirects", n)
		}
	})

	// Retry-After: the next attempt's delay is the header's, capped by
	// max_delay; a value that is not a wait leaves the policy's backoff.
	t.Run("Retry-After", func(t *testing.T) {
		var ra atomic.Value
		srv := target(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", ra.Load().(string))
			var code int
			_, _ = fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
			w.WriteHeader(code)
		})
		const backoff, maxDelay = 20 * time.Millisecond, 300 * time.Millisecond
		now := time.Now().UTC()
		cases := []struct {
			status int
			value  string
			delay  time.Duration // of the first attempt; -1: succeeded; -2: dead at once
		}{
			{503, "0", backoff},
			{503, "", backoff},
			{503, "soon", backoff},
			{503, "-5", backoff},
			{503, "1.5", backoff},
			{503, now.Add(-time.Hour).Format(http.TimeFormat), backoff},
			{503, now.Add(10 * 365 * 24 * time.Hour).Format(http.TimeFormat), maxDelay},
			{429, "99999999999999999999999", maxDelay},
			{429, "9223372036", maxDelay},
			{429, "9223372037", maxDelay},
			{503, "1", maxDelay},
			{200, "60", -1},
			{404, "1", -2},
		}
		for _, c := range cases {
			ra.Store(c.value)
			typ := newType()
			pol := fastPolicy(2)
			pol.InitialDelay, pol.MaxDelay = backoff, maxDelay
			p.putType(typ, pol, Target{URL: fmt.Sprintf("%s/%d", srv.URL, c.status)})
			id := p.enqueue(typ, `{}`)
			tk := p.wait(id, store.StateSucceeded, store.StateDead)
			as := p.attempts(id)
			switch c.delay {
			case -1:
				if tk.State != store.StateSucceeded {
					t.Errorf("%d with Retry-After %q: %s, want succeeded", c.status, c.value, tk.State)
				}
			case -2:
				if tk.DeadReason != store.DeadNonRetryable {
					t.Errorf("%d with Retry-After %q: %s %q, want dead non_retryable", c.status, c.value, tk.State, tk.DeadReason)
				}
			default:
				if len(as) != 2 || as[0].Delay != c.delay {
					t.Errorf("%d with Retry-After %q: history %+v, want two attempts %v apart", c.status, c.value, as, c.delay)
				}
			}
		}
		// A retry window shorter than the asked wait ends the task.
		ra.Store("3600")
		typ := newType()
		pol := fastPolicy(5)
		pol.MaxDelay, pol.RetryWindow = time.Hour, time.Minute
		p.putType(typ, pol, Target{URL: srv.URL + "/503"})
		id := p.enqueue(typ, `{}`)
		if tk := p.wait(id, store.StateDead); tk.DeadReason != store.DeadRetryWindow || tk.Attempt != 1 {
			t.Errorf("Retry-After past the retry window: dead %q after %d attempts, want retry_window after 1", tk.DeadReason, tk.Attempt)
		}
	})

	// 1xx answers before the final one are skipped; endless ones are cut
	// short like endless headers.
	t.Run("informational", func(t *testing.T) {
		url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
			_, _ = io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
		})
		if tk, as := deliver(t, 1, Target{URL: url}); tk.State != store.StateSucceeded || as[0].Detail != "HTTP 200: ok" {
			t.Errorf("1xx then 200: %s, history %+v; want succeeded with the 200's body", tk.State, as)
		}
		endless := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
			for {
				if _, err := io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n"); err != nil {
					return
				}
			}
		})
		tk, as := deliver(t, 1, Target{URL: endless, TimeoutSeconds: 10})
		if tk.State != store.StateDead || as[0].Error == nil || as[0].Error.Code != CodeDeliveryError || lasted(as[0]) > 5*time.Second {
			t.Errorf("endless 1xx: %s, history %+v; want a delivery_error well before the 10 s timeout", tk.State, as)
		}
	})

	// The connection is reset after the request was read: the target may
	// have acted on it, so it is retried (at least once) and the history
	// says the connection was reset.
	t.Run("reset after the request", func(t *testing.T) {
		var n atomic.Int32
		url := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
			if n.Add(1) == 1 {
				_ = c.(*net.TCPConn).SetLinger(0)
				_ = c.Close()
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		})
		tk, as := deliver(t, 3, Target{URL: url})
		if tk.State != store.StateSucceeded || len(as) != 2 {
			t.Fatalf("%s, history %+v; want a retry that succeeds", tk.State, as)
		}
		if e := as[0].Error; e == nil || e.Code != "connection_reset" || e.Class != "transient" ||
			!strings.Contains(e.Message, "may have") {
			t.Errorf("first error %+v; want connection_reset transient saying the target may have received the request", e)
		}
	})

	// A keep-alive connection the target closes as the next request
	// arrives (its idle timeout running out then) fails that attempt as a
	// reset: net/http does not resend it, nor does retryq outside Decide.
	// The history says the connection was a reused one.
	t.Run("keep-alive closed by the target", func(t *testing.T) {
		// Each connection's first request is answered and the connection
		// kept; its second one is not. The requests go one at a time
		// (Concurrency 1), so a task's request goes on the connection the
		// last one left, except where net/http did not take that back in
		// time (under load, its writer reporting the request written after
		// 50 ms): that task succeeds on a new connection, and the next one
		// tries again.
		var mu sync.Mutex
		served := map[net.Conn]int{}
		raceClose := rawTarget(t, func(c net.Conn, stop <-chan struct{}) {
			mu.Lock()
			served[c]++
			n := served[c]
			mu.Unlock()
			if n == 1 {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") // kept alive
				return
			}
			_ = c.Close() // a request on the kept connection: no answer
		})
		typ := newType()
		p.putType(typ, fastPolicy(3), Target{URL: raceClose, Concurrency: 1})
		p.wait(p.enqueue(typ, `{}`), store.StateSucceeded)
		var as []store.Attempt
		for try := 0; try < 5 && len(as) < 2; try++ {
			id := p.enqueue(typ, `{}`)
			if tk := p.wait(id, store.StateSucceeded, store.StateDead); tk.State != store.StateSucceeded {
				t.Fatalf("%s, history %+v; want succeeded, at the latest on a new connection", tk.State, p.attempts(id))
			}
			as = p.attempts(id)
		}
		if len(as) != 2 {
			t.Fatalf("history %+v; want a failed attempt on the closed connection, then a success", as)
		}
		if e := as[0].Error; e == nil || e.Code != "connection_reset" || e.Class != "transient" ||
			!strings.Contains(e.Message, "reused") || !strings.Contains(e.Message, "may have") {
			t.Errorf("first error %+v; want connection_reset transient naming the reused connection", e)
		}
	})

	// An https URL at a plain HTTP port fails the TLS handshake: retried,
	// with a message saying so.
	t.Run("TLS against plain HTTP", func(t *testing.T) {
		srv := target(t, func(w http.ResponseWriter, r *http.Request) {})
		tk, as := deliver(t, 2, Target{URL: strings.Replace(srv.URL, "http:", "https:", 1), TimeoutSeconds: 2})
		if tk.DeadReason != store.DeadMaxAttempts || len(as) != 2 || as[0].Error == nil || as[0].Error.Class == "permanent" {
			t.Fatalf("dead %q, history %+v; want retried until max attempts", tk.DeadReason, as)
		}
		t.Logf("error: %+v", as[0].Error)
	})

	removeTargets()
	base.Settled(t, 10*time.Second, "deliveries to misbehaving targets")
}
