package engine

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestPushLeaseOutlastsTheFirstHeartbeat: a push delivery's lease is
// extended by the heartbeat loop, which runs every third of the engine's
// LeaseDuration, and the lease watchdog stops a delivery a tenth of that
// duration before its lease's known expiry. A push fetch leased for the
// target's timeout plus a margin only: with a long LeaseDuration (--lease
// 5m) and a short target timeout, the watchdog's next pass stopped a
// delivery still well within its timeout (its lease "about to expire"
// before any heartbeat was due), gave the task back uncounted and
// delivered it again, and the store's lease could run out before the
// first heartbeat.
func TestPushLeaseOutlastsTheFirstHeartbeat(t *testing.T) {
	backendtest.Run(t, testPushLeaseOutlastsTheFirstHeartbeat)
}

func testPushLeaseOutlastsTheFirstHeartbeat(t *testing.T, backend string) {
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	var requests atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		case <-r.Context().Value(stopKey{}).(chan struct{}):
		}
	})
	leaseDur := 5 * time.Minute
	p := newPushEnvWith(t, backend, Config{LeaseDuration: leaseDur})
	p.putType("push.longlease", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 5})
	before := p.e.now()
	id := p.enqueue("push.longlease", `{}`)
	recvWithin(t, arrived, 10*time.Second, "the delivery")

	tk, err := p.e.Store().GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.LeaseExpiresAt.Sub(before); got < leaseDur {
		t.Errorf("push lease runs %v from the enqueue, want at least the engine's LeaseDuration %v "+
			"(the first heartbeat may come a third of it after the fetch)", got, leaseDur)
	}
	// A pass of the watchdog now, as one may come at any moment before the
	// first heartbeat, must leave the delivery alone.
	if stopped, _ := p.e.leases.expire(p.e.now(), watchdogMargin(leaseDur)); len(stopped) != 0 {
		t.Errorf("the lease watchdog stopped %v one moment into a delivery with a 5s timeout", stopped)
	}
	close(release)
	tk = p.wait(id, store.StateSucceeded)
	if n := requests.Load(); tk.Attempt != 1 || n != 1 {
		t.Errorf("succeeded at attempt %d after %d requests, want 1 and 1", tk.Attempt, n)
	}
}
