package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/leakcheck"
	"github.com/retryq/retryq/store/sqlite"
)

// TestCancelledLongPollsLeakNothing: pull workers that hang up in the
// middle of their long polls, many times over, leave nothing behind: no
// request still waiting in the engine, and no more goroutines nor
// descriptors (connections) than after the first.
func TestCancelledLongPollsLeakNothing(t *testing.T) {
	// One reader: a read pool growing to its bound over the cycles would
	// read as descriptors leaked.
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "retryq.db"), MaxReaders: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{store: st})
	hc := &http.Client{Transport: &http.Transport{}}
	body := []byte(`{"worker_id":"w1","types":["lp.leak"],"wait_seconds":30}`)
	poll := func() {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/leases", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		done := make(chan error, 1)
		go func() {
			res, err := hc.Do(req)
			if err == nil {
				_ = res.Body.Close()
				err = errors.New("answered " + res.Status + " before the client hung up")
			}
			done <- err
		}()
		waitLongPolls(t, e, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("long poll: %v, want the client's cancellation", err)
		}
		waitLongPolls(t, e, 0)
	}
	// The node's scheduler loops, started once it is elected, count in the
	// baseline too: a baseline taken before the election lacked their
	// goroutine (a loaded run failed so, with one goroutine more after).
	// IsLeader turns true just before that goroutine starts.
	waitSchedulerRunning(t, e)
	poll() // the server's and the client's lazily started parts count in the baseline
	hc.CloseIdleConnections()
	// A read cancelled with its long poll discards the reader connection
	// it ran on, and the next read opens one anew: the baseline holds it.
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := leakcheck.Take(t)
	for range 30 {
		poll()
	}
	hc.CloseIdleConnections()
	base.Settled(t, 10*time.Second, "30 long polls cancelled by their clients")
}

// waitLongPolls waits until n lease requests wait in the engine.
func waitLongPolls(t *testing.T, e *env, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.eng.LongPolls() != n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d long polls waiting, want %d", e.eng.LongPolls(), n)
		}
	}
}

// waitSchedulerRunning waits until the env's node leads and its scheduler
// loops' goroutine runs.
func waitSchedulerRunning(t *testing.T, e *env) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if e.eng.IsLeader() && bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("engine.(*Engine).runScheduler(")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not lead with its scheduler loops running within 30 s (leader: %v)", e.eng.IsLeader())
		}
	}
}
