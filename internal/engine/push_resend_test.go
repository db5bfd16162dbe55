package engine

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// TestPushNeverResendsOnItsOwn: net/http resends a request by itself when
// a reused connection closes before the answer, if it deems the request
// idempotent (a GET, or one with an Idempotency-Key header). A delivery
// must not: every send is an attempt that Decide sees and the history
// counts. The target answers the first task, then closes the connection on
// the second task's first request.
func TestPushNeverResendsOnItsOwn(t *testing.T) { backendtest.Run(t, testPushNeverResendsOnItsOwn) }

func testPushNeverResendsOnItsOwn(t *testing.T, backend string) {
	var (
		mu       sync.Mutex
		attempts = map[string][]string{} // task id -> Retryq-Attempt of each request
		armed    atomic.Bool
	)
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderTaskID)
		mu.Lock()
		attempts[id] = append(attempts[id], r.Header.Get(HeaderAttempt))
		n := len(attempts[id])
		mu.Unlock()
		if n == 1 && armed.Load() {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = c.Close() // no answer: the connection just closes
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	p := newPushEnvOn(t, backend, 0)
	p.putType("push.get", fastPolicy(5), Target{URL: srv.URL, Method: "GET", Concurrency: 1})
	a := p.enqueue("push.get", `{}`)
	p.wait(a, store.StateSucceeded) // leaves an idle connection to reuse
	armed.Store(true)
	b := p.enqueue("push.get", `{}`)
	tk := p.wait(b, store.StateSucceeded)
	mu.Lock()
	got := attempts[b]
	mu.Unlock()
	if tk.Attempt != 2 || len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("task succeeded at attempt %d; the target saw attempts %v; want attempts [1 2], each decided by retryq", tk.Attempt, got)
	}
	if h := p.attempts(b); len(h) != 2 || h[0].Outcome != store.OutcomeFailed {
		t.Fatalf("history = %+v, want the failed first attempt and the success", h)
	}
}

// TestPushDNSNotFoundIsRetried: a target name that does not resolve (a
// service being recreated, a DNS hiccup) is a transient failure of the
// delivery, retried by the policy, not a permanent one that dead-letters
// every task of the type at its first attempt.
func TestPushDNSNotFoundIsRetried(t *testing.T) {
	r := pushResult{err: &net.DNSError{Err: "no such host", Name: "svc.example", IsNotFound: true}}
	f := r.failure(&pushTarget{})
	if f.Class != retry.ClassTransient || f.Code != retry.CodeDNSNotFound {
		t.Fatalf("failure = %+v, want class transient, code %s", f, retry.CodeDNSNotFound)
	}
}
