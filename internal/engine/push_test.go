package engine

import (
	"context"
	"fmt"
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

func TestPushSuccess(t *testing.T) { backendtest.Run(t, testPushSuccess) }

func testPushSuccess(t *testing.T, backend string) {
	var h hits
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		io.WriteString(w, `{"ok":true}`)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.ok", fastPolicy(3), Target{URL: srv.URL + "/hook", Headers: map[string]string{"X-Custom": "v1"}})
	payload := `{"order":42,"items":["a","b"]}`
	id := p.enqueue("push.ok", payload)
	tk := p.wait(id, store.StateSucceeded)
	if tk.Attempt != 1 {
		t.Errorf("attempt = %d, want 1", tk.Attempt)
	}
	reqs := h.get()
	if len(reqs) != 1 {
		t.Fatalf("target got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	checks := []struct{ name, got, want string }{
		{"method", r.method, "POST"},
		{"body", r.body, payload},
		{"Retryq-Task-Id", r.header.Get("Retryq-Task-Id"), id},
		{"Retryq-Attempt", r.header.Get("Retryq-Attempt"), "1"},
		{"Retryq-Task-Type", r.header.Get("Retryq-Task-Type"), "push.ok"},
		{"Content-Type", r.header.Get("Content-Type"), "application/json"},
		{"X-Custom", r.header.Get("X-Custom"), "v1"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	as := p.attempts(id)
	if len(as) != 1 || as[0].Outcome != store.OutcomeSucceeded {
		t.Fatalf("history = %+v, want one succeeded attempt", as)
	}
	if as[0].Detail != `HTTP 200: {"ok":true}` {
		t.Errorf("detail = %q", as[0].Detail)
	}
	if as[0].WorkerID != "push-node/push" {
		t.Errorf("worker = %q, want push-node/push", as[0].WorkerID)
	}
}

func TestPushPermanent400(t *testing.T) { backendtest.Run(t, testPushPermanent400) }

func testPushPermanent400(t *testing.T, backend string) {
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path == "/big" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, strings.Repeat("x", 3000))
			return
		}
		http.Error(w, "invalid field: name", http.StatusBadRequest)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.bad", fastPolicy(5), Target{URL: srv.URL})
	id := p.enqueue("push.bad", `{}`)
	tk := p.wait(id, store.StateDead)
	if tk.Attempt != 1 || tk.DeadReason != store.DeadNonRetryable {
		t.Errorf("attempt %d reason %q, want 1 non_retryable", tk.Attempt, tk.DeadReason)
	}
	as := p.attempts(id)
	if len(as) != 1 {
		t.Fatalf("history has %d attempts, want 1", len(as))
	}
	if e := as[0].Error; e == nil || e.Code != "400" || e.Class != "permanent" {
		t.Errorf("error = %+v, want code 400 class permanent", e)
	}
	if !strings.HasPrefix(as[0].Detail, "HTTP 400: invalid field: name") {
		t.Errorf("detail = %q", as[0].Detail)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("target hit %d times, want 1", got)
	}

	// A large body is cut to its first KiB.
	p.putType("push.big", fastPolicy(5), Target{URL: srv.URL + "/big"})
	id = p.enqueue("push.big", `{}`)
	p.wait(id, store.StateDead)
	as = p.attempts(id)
	d := as[0].Detail
	if as[0].Error.Code != "422" || !strings.HasPrefix(d, "HTTP 422: xxx") || !strings.HasSuffix(d, "[truncated]") ||
		strings.Count(d, "x") != 1024 {
		t.Errorf("detail (%d bytes) = %.80q…, want 1 KiB excerpt", len(d), d)
	}
}

func TestPushRetryAfter(t *testing.T) { backendtest.Run(t, testPushRetryAfter) }

func testPushRetryAfter(t *testing.T, backend string) {
	var h hits
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		n := h.add(r)
		if n == 1 {
			w.Header().Set("Retry-After", r.URL.Query().Get("ra"))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.429", fastPolicy(3), Target{URL: srv.URL + "?ra=2"})
	id := p.enqueue("push.429", `{}`)
	tk := p.wait(id, store.StateSucceeded)
	reqs := h.get()
	if tk.Attempt != 2 || len(reqs) != 2 {
		t.Fatalf("attempt %d, %d requests; want 2 and 2", tk.Attempt, len(reqs))
	}
	gap := reqs[1].at.Sub(reqs[0].at)
	t.Logf("Retry-After: 2 → second request %v after the first", gap)
	if gap < 2*time.Second {
		t.Errorf("second attempt came %v after the first, want >= 2s", gap)
	}
	as := p.attempts(id)
	if as[0].Error == nil || as[0].Error.Code != "429" || as[0].Delay != 2*time.Second {
		t.Errorf("first attempt = %+v, want code 429 delay 2s", as[0])
	}
	if reqs[1].header.Get("Retryq-Attempt") != "2" {
		t.Errorf("Retryq-Attempt of the retry = %q, want 2", reqs[1].header.Get("Retryq-Attempt"))
	}
}

func TestPushRetryAfterCappedByMaxDelay(t *testing.T) {
	backendtest.Run(t, testPushRetryAfterCappedByMaxDelay)
}

func testPushRetryAfterCappedByMaxDelay(t *testing.T, backend string) {
	var h hits
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if h.add(r) == 1 {
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	})
	p := newPushEnvOn(t, backend, 0)
	pol := fastPolicy(3)
	pol.MaxDelay = 300 * time.Millisecond
	p.putType("push.cap", pol, Target{URL: srv.URL})
	id := p.enqueue("push.cap", `{}`)
	p.wait(id, store.StateSucceeded)
	as := p.attempts(id)
	if as[0].Delay != 300*time.Millisecond {
		t.Errorf("delay after an HTTP-date Retry-After of +1h = %v, want the policy's max delay 300ms", as[0].Delay)
	}
	if reqs := h.get(); reqs[1].at.Sub(reqs[0].at) < 300*time.Millisecond {
		t.Errorf("retry came after %v, want >= 300ms", reqs[1].at.Sub(reqs[0].at))
	}
}

func TestPush503Then200(t *testing.T) { backendtest.Run(t, testPush503Then200) }

func testPush503Then200(t *testing.T, backend string) {
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.503", fastPolicy(3), Target{URL: srv.URL})
	id := p.enqueue("push.503", `{}`)
	tk := p.wait(id, store.StateSucceeded)
	if tk.Attempt != 2 {
		t.Errorf("attempt = %d, want 2", tk.Attempt)
	}
	as := p.attempts(id)
	if len(as) != 2 || as[0].Outcome != store.OutcomeFailed || as[1].Outcome != store.OutcomeSucceeded {
		t.Fatalf("history = %+v", as)
	}
	if e := as[0].Error; e.Code != "503" || e.Class != "transient" {
		t.Errorf("first error = %+v, want 503 transient", e)
	}
	if as[0].Detail != "HTTP 503: busy\n" {
		t.Errorf("detail = %q", as[0].Detail)
	}
}

func TestPushTimeout(t *testing.T) { backendtest.Run(t, testPushTimeout) }

func testPushTimeout(t *testing.T, backend string) {
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			hang(r) // until the client gives up
			return
		}
	})
	p := newPushEnvOn(t, backend, 0)
	// 1 s rather than less: the second attempt's request, answered at
	// once, must come back within it on a loaded machine too.
	p.putType("push.hang", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 1})
	id := p.enqueue("push.hang", `{}`)
	tk := p.wait(id, store.StateSucceeded)
	as := p.attempts(id)
	if tk.Attempt != 2 {
		t.Errorf("attempt = %d, want 2; history %+v", tk.Attempt, as)
	}
	if e := as[0].Error; e == nil || e.Code != "timeout" || e.Class != "transient" {
		t.Errorf("first error = %+v, want timeout transient", e)
	}
	if d := as[0].FinishedAt.Sub(as[0].StartedAt); d < time.Second {
		t.Errorf("timed-out attempt lasted %v, want >= 1s", d)
	}
}

func TestPushConnectionClosed(t *testing.T) { backendtest.Run(t, testPushConnectionClosed) }

func testPushConnectionClosed(t *testing.T, backend string) {
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // no response at all
			}
			return
		}
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.close", fastPolicy(3), Target{URL: srv.URL})
	id := p.enqueue("push.close", `{}`)
	p.wait(id, store.StateSucceeded)
	as := p.attempts(id)
	if e := as[0].Error; e == nil || e.Code != "connection_reset" || e.Class != "transient" {
		t.Errorf("first error = %+v, want connection_reset transient", e)
	}
}

func TestPushConnectionRefused(t *testing.T) { backendtest.Run(t, testPushConnectionRefused) }

func testPushConnectionRefused(t *testing.T, backend string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.refused", fastPolicy(2), Target{URL: "http://" + addr + "/"})
	id := p.enqueue("push.refused", `{}`)
	tk := p.wait(id, store.StateDead)
	if tk.DeadReason != store.DeadMaxAttempts || tk.Attempt != 2 {
		t.Errorf("dead %q after %d attempts, want max_attempts after 2", tk.DeadReason, tk.Attempt)
	}
	for i, a := range p.attempts(id) {
		if a.Error == nil || a.Error.Code != "connection_refused" || a.Error.Class != "transient" {
			t.Errorf("attempt %d error = %+v, want connection_refused transient", i+1, a.Error)
		}
	}
}

func TestPushRedirectNotFollowed(t *testing.T) { backendtest.Run(t, testPushRedirectNotFollowed) }

func testPushRedirectNotFollowed(t *testing.T, backend string) {
	var followed atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			followed.Add(1)
			return
		}
		http.Redirect(w, r, "/moved", http.StatusFound)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.redirect", fastPolicy(3), Target{URL: srv.URL + "/old"})
	id := p.enqueue("push.redirect", `{}`)
	tk := p.wait(id, store.StateDead)
	as := p.attempts(id)
	if tk.DeadReason != store.DeadNonRetryable || as[0].Error.Code != "302" || !strings.Contains(as[0].Detail, "redirect to /moved not followed") {
		t.Errorf("reason %q, attempt %+v; want non_retryable 302 with the location in the detail", tk.DeadReason, as[0])
	}
	if followed.Load() != 0 {
		t.Error("the redirect was followed")
	}
}

// A type whose target hangs fills its own slots only: another type's tasks
// are delivered at once, and the hanging type never has more than its
// concurrency in flight.
func TestPushIsolationAndConcurrency(t *testing.T) {
	backendtest.Run(t, testPushIsolationAndConcurrency)
}

func testPushIsolationAndConcurrency(t *testing.T, backend string) {
	release := make(chan struct{})
	var slowNow, slowMax, slowDone atomic.Int32
	slow := target(t, func(w http.ResponseWriter, r *http.Request) {
		n := slowNow.Add(1)
		for {
			m := slowMax.Load()
			if n <= m || slowMax.CompareAndSwap(m, n) {
				break
			}
		}
		defer slowNow.Add(-1)
		select {
		case <-release:
			slowDone.Add(1)
		case <-r.Context().Done():
		case <-r.Context().Value(stopKey{}).(chan struct{}):
		}
	})
	fast := target(t, func(w http.ResponseWriter, r *http.Request) {})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.slow", fastPolicy(3), Target{URL: slow.URL, TimeoutSeconds: 30, Concurrency: 2})
	p.putType("push.fast", fastPolicy(3), Target{URL: fast.URL, Concurrency: 4})
	var slowIDs []string
	for i := 0; i < 5; i++ {
		slowIDs = append(slowIDs, p.enqueue("push.slow", fmt.Sprintf(`{"i":%d}`, i)))
	}
	waitFor(t, "2 slow deliveries in flight", func() bool { return slowNow.Load() == 2 })

	start := time.Now()
	var fastIDs []string
	for i := 0; i < 10; i++ {
		fastIDs = append(fastIDs, p.enqueue("push.fast", fmt.Sprintf(`{"i":%d}`, i)))
	}
	for _, id := range fastIDs {
		p.wait(id, store.StateSucceeded)
	}
	took := time.Since(start)
	t.Logf("10 fast deliveries took %v while the slow target hung", took)
	// Queued behind the slow type they would wait for the release (each
	// wait gives up after 10 s); 8 s leaves a loaded machine room.
	if took > 8*time.Second {
		t.Errorf("fast deliveries took %v behind a hanging type", took)
	}
	if n := slowNow.Load(); n != 2 {
		t.Errorf("slow deliveries in flight = %d, want 2 (still hanging)", n)
	}

	close(release)
	for _, id := range slowIDs {
		if tk := p.wait(id, store.StateSucceeded); tk.Attempt != 1 {
			t.Errorf("slow task %s: attempt %d, want 1", id, tk.Attempt)
		}
	}
	if m := slowMax.Load(); m != 2 {
		t.Errorf("max slow deliveries in flight = %d, want the concurrency 2", m)
	}
	if d := slowDone.Load(); d != 5 {
		t.Errorf("slow target answered %d, want 5", d)
	}
}

// Close cancels deliveries still running after the grace and releases their
// leases: the task is pending again with the attempt not counted.
func TestPushShutdownReleases(t *testing.T) { backendtest.Run(t, testPushShutdownReleases) }

func testPushShutdownReleases(t *testing.T, backend string) {
	arrived := make(chan struct{}, 1)
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		hang(r)
	})
	p := newPushEnvOn(t, backend, 0)
	p.e.push.grace = 50 * time.Millisecond
	p.putType("push.shutdown", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 60})
	id := p.enqueue("push.shutdown", `{}`)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("delivery never arrived")
	}
	start := time.Now()
	if err := p.e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start))
	tk, err := p.e.Store().GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.Attempt != 0 || tk.LeaseID != "" {
		t.Errorf("after Close: state %s attempt %d lease %q; want pending, 0, none", tk.State, tk.Attempt, tk.LeaseID)
	}
	if as, _ := p.e.Store().ListAttempts(context.Background(), id); len(as) != 0 {
		t.Errorf("history = %+v, want none (a release is not an attempt)", as)
	}
}

// Cancelling a task while it is being delivered cancels the request (the
// heartbeat finds the lease gone).
func TestPushLeaseLostCancelsDelivery(t *testing.T) {
	backendtest.Run(t, testPushLeaseLostCancelsDelivery)
}

func testPushLeaseLostCancelsDelivery(t *testing.T, backend string) {
	arrived := make(chan struct{}, 1)
	aborted := make(chan struct{})
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // the test fails on its own deadline if this never comes
		close(aborted)
	})
	p := newPushEnvOn(t, backend, 600*time.Millisecond) // heartbeat every 200ms
	p.putType("push.cancel", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 60})
	id := p.enqueue("push.cancel", `{}`)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("delivery never arrived")
	}
	if _, err := p.e.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("delivery not cancelled after the task was")
	}
	if tk := p.wait(id, store.StateCancelled); len(p.attempts(id)) != 0 {
		t.Errorf("task %s: history %+v, want none", tk.ID, p.attempts(id))
	}
}

// A target added to a type with PutType is picked up at once (not on the
// next periodic reload), and removing it stops deliveries.
func TestPushTargetChanges(t *testing.T) { backendtest.Run(t, testPushTargetChanges) }

func testPushTargetChanges(t *testing.T, backend string) {
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) { n.Add(1) })
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.change", fastPolicy(3), Target{URL: srv.URL})
	start := time.Now()
	id := p.enqueue("push.change", `{}`)
	p.wait(id, store.StateSucceeded)
	if d := time.Since(start); d > pushRefreshInterval/2 {
		t.Errorf("first delivery took %v: PutType did not refresh the targets", d)
	}
	if err := p.e.checkNoPushTargets(context.Background(), []string{"other", "push.change"}); err == nil {
		t.Error("checkNoPushTargets accepted a push type")
	}

	if _, err := p.e.PutType(context.Background(), TypeSpec{Type: "push.change", Policy: fastPolicy(3)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fetcher to stop", func() bool {
		p.e.push.mu.Lock()
		defer p.e.push.mu.Unlock()
		return p.e.push.fetchers["push.change"] == nil
	})
	id = p.enqueue("push.change", `{}`)
	// Nothing delivers it now; a worker could.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tasks, err := p.e.Lease(ctx, LeaseRequest{WorkerID: "w", Types: []string{"push.change"}, Wait: 250 * time.Millisecond})
	if err != nil || len(tasks) != 1 || tasks[0].ID != id {
		t.Fatalf("lease after removing the target = %v, %v; want the task", tasks, err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("target hit %d times, want 1", got)
	}
}
