package engine

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// connTarget is a push target that counts its open connections and holds
// each request until the test lets it answer.
type connTarget struct {
	srv     *httptest.Server
	open    atomic.Int64
	got     chan struct{} // a request arrived
	release chan struct{} // answer one held request
}

func newConnTarget(t *testing.T) *connTarget {
	t.Helper()
	c := &connTarget{got: make(chan struct{}, 16), release: make(chan struct{}, 16)}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.got <- struct{}{}
		select {
		case <-c.release:
		case <-r.Context().Done():
		}
	}))
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			c.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			c.open.Add(-1)
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

// waitClosed waits until the target has no connection open.
func (c *connTarget) waitClosed(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the target still has %d connections open", what, c.open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRemovedPushTargetsKeepNoConnections changes and removes a type's
// push target while a delivery to it is in flight, many times: once the
// deliveries to a target no longer configured have finished, the node
// keeps no connection to it (an idle keep-alive connection stayed open
// in the shared transport's pool for its idle timeout, 90 s, after every
// change), nor goroutines, descriptors or entries for it.
func TestRemovedPushTargetsKeepNoConnections(t *testing.T) {
	ctx := context.Background()
	p := newLeakCheckedPushEnv(t)
	put := func(typ string, tg *Target) {
		t.Helper()
		if _, err := p.e.PutType(ctx, TypeSpec{Type: typ, Policy: fastPolicy(3), Target: tg}); err != nil {
			t.Fatal(err)
		}
	}
	// synced waits until the pusher's fetcher of typ delivers to url
	// ("": has no fetcher).
	synced := func(typ, url string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("the pusher to take %s's target %q", typ, url), func() bool {
			p.e.push.mu.Lock()
			defer p.e.push.mu.Unlock()
			f := p.e.push.fetchers[typ]
			if url == "" {
				return f == nil
			}
			return f != nil && f.target.Load().url == url
		})
	}
	// deliverWhile enqueues a task of typ, and once its delivery reached
	// to, calls change and lets the delivery answer.
	deliverWhile := func(typ string, to *connTarget, change func()) {
		t.Helper()
		id := p.enqueue(typ, `{}`)
		select {
		case <-to.got:
		case <-time.After(10 * time.Second):
			t.Fatal("the delivery did not reach the target")
		}
		change()
		to.release <- struct{}{}
		p.wait(id, store.StateSucceeded)
	}
	a, b := newConnTarget(t), newConnTarget(t)
	cycle := func(i int) {
		t.Helper()
		typ := fmt.Sprintf("push.leak%d", i%3)
		put(typ, &Target{URL: a.srv.URL})
		synced(typ, a.srv.URL)
		// The target changes to another server while a delivery to the
		// first one is in flight...
		deliverWhile(typ, a, func() {
			put(typ, &Target{URL: b.srv.URL})
			synced(typ, b.srv.URL)
		})
		a.waitClosed(t, fmt.Sprintf("cycle %d: the target changed to another URL", i))
		// ... and is removed while one to the second is.
		deliverWhile(typ, b, func() {
			put(typ, nil)
			synced(typ, "")
		})
		b.waitClosed(t, fmt.Sprintf("cycle %d: the target removed", i))
	}
	cycle(0) // the store's readers, opened as needed, count in the baseline
	openReader(t, p.e)
	base := leakcheck.Take(t)
	for i := 1; i <= 20; i++ {
		cycle(i)
	}
	base.Settled(t, 5*time.Second, "20 push targets changed and removed during deliveries")
}

// openReader makes e's store open its one reader connection again, for a
// baseline: a read cancelled on the way (a fetcher stopped) discards the
// connection it ran on, and the next read opens one anew; a baseline
// taken in between would lack that connection's descriptors.
func openReader(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// newLeakCheckedPushEnv starts an engine polling every 50 ms on a SQLite
// store with one reader (a read pool growing to its bound would read as
// descriptors leaked by the deliveries), for tests that count the
// process's goroutines and descriptors.
func newLeakCheckedPushEnv(t *testing.T) *pushEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "retryq.db"), Synchronous: "NORMAL", MaxReaders: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: st, NodeID: "push-node", Version: "test", PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Close()
		_ = st.Close()
	})
	// The scheduler loops' goroutine, started once the node leads, belongs
	// in the tests' baselines: they wait for the loops to promote a probe
	// task. A loaded machine could elect the node only after a baseline,
	// which then counted the loops as a goroutine leaked by the deliveries.
	probe := enqueueScheduled(t, e, "push.leakprobe", 100*time.Millisecond)
	waitFor(t, "the scheduler loops to promote a probe", func() bool { return e.Counters().Promoted > 0 })
	if _, err := e.Cancel(ctx, probe); err != nil {
		t.Fatal(err)
	}
	return &pushEnv{t: t, e: e}
}
