package engine

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestPushConcurrencyHoldsWhenTargetReturns: a target removed while a
// delivery is in flight and put back gets a new fetcher, which must count
// the old fetcher's delivery against the type's concurrency, not start
// from zero.
func TestPushConcurrencyHoldsWhenTargetReturns(t *testing.T) {
	backendtest.Run(t, testPushConcurrencyHoldsWhenTargetReturns)
}

func testPushConcurrencyHoldsWhenTargetReturns(t *testing.T, backend string) {
	var cur, peak atomic.Int32
	release := make(chan struct{})
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	p := newPushEnvOn(t, backend, 0)
	tg := Target{URL: srv.URL, Concurrency: 1}
	p.putType("push.cc", fastPolicy(3), tg)
	ids := []string{p.enqueue("push.cc", `1`), p.enqueue("push.cc", `2`), p.enqueue("push.cc", `3`)}
	fetcher := func() *pushFetcher {
		p.e.push.mu.Lock()
		defer p.e.push.mu.Unlock()
		return p.e.push.fetchers["push.cc"]
	}
	waitFor(t, "a delivery in flight", func() bool { return cur.Load() == 1 })
	old := fetcher()
	if _, err := p.e.PutType(context.Background(), TypeSpec{Type: "push.cc", Policy: fastPolicy(3)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the target's removal", func() bool { return fetcher() == nil })
	p.putType("push.cc", fastPolicy(3), tg)
	waitFor(t, "the target's return", func() bool { f := fetcher(); return f != nil && f != old })
	if n := fetcher().slots.inFlight.Load(); n != 1 {
		t.Fatalf("the new fetcher counts %d deliveries in flight, want 1 (the old fetcher's)", n)
	}
	close(release)
	for _, id := range ids {
		p.wait(id, store.StateSucceeded)
	}
	if n := peak.Load(); n != 1 {
		t.Fatalf("%d deliveries ran at once with concurrency 1", n)
	}
}
