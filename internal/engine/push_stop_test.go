package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestPushStoppedDuringFetchReleasesLeases: an engine closed while a push
// fetch is committing does not lose what the fetch leased (the tasks would
// wait for the reaper, an attempt counted): the fetch ends regardless, and
// the pusher gives the tasks back without delivering them.
func TestPushStoppedDuringFetchReleasesLeases(t *testing.T) {
	backendtest.Run(t, testPushStoppedDuringFetchReleasesLeases)
}

func testPushStoppedDuringFetchReleasesLeases(t *testing.T, backend string) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	st := &fetchHook{Store: openWorkerStoreOn(t, backend), fetched: make(chan struct{}), proceed: make(chan struct{})}
	e, err := New(Config{Store: st, NodeID: "push-stop", PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	defer func() {
		select {
		case <-st.proceed:
		default:
			close(st.proceed)
		}
		_ = e.Close()
	}()
	id := mustEnqueue(t, e, "hook", `1`) // before the target exists: fetched, not pushed at enqueue
	st.armed.Store(true)
	if _, err := e.PutType(context.Background(), TypeSpec{Type: "hook", Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, st.fetched, 10*time.Second, "the push fetch to commit")
	go func() { closed <- e.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		e.push.mu.Lock()
		stopped := e.push.stopped
		e.push.mu.Unlock()
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pusher never began to stop")
		}
	}
	close(st.proceed)
	if err := recvWithin(t, closed, 30*time.Second, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tk, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.LeaseID != "" || tk.Attempt != 0 {
		t.Errorf("after Close: state %s, lease %q, attempt %d; want pending, released, no attempt counted", tk.State, tk.LeaseID, tk.Attempt)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d deliveries after the pusher stopped", n)
	}
}
