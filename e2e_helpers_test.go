package retryq_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestMain stops the throwaway PostgreSQL cluster (if a test started one)
// when the tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// openStore opens a fresh SQLite file in the test's temp dir.
func openStore(t testing.TB, path string) store.Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "retryq.db")
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	return st
}

// fastPolicy retries almost at once, so tests run quickly.
func fastPolicy(attempts int) retry.Policy {
	p := retry.DefaultPolicy()
	p.Backoff = retry.BackoffFixed
	p.InitialDelay = 5 * time.Millisecond
	p.MaxDelay = 5 * time.Second
	p.Jitter = retry.JitterNone
	p.MaxAttempts = attempts
	return p
}

type env struct {
	t      *testing.T
	st     store.Store
	client *retryq.Client
	mux    *retryq.Mux
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newEnvOn(t *testing.T, st store.Store, opts retryq.Options) *env {
	t.Helper()
	if opts.LeaseDuration == 0 {
		// Long enough that a loaded machine's slow commits and late
		// heartbeats do not expire the lease of a handler that returned
		// in time: the reaper would run its task again, and the enqueue
		// and outcome calls (bounded by the lease) would time out. Tests
		// of lease expiry set their own.
		opts.LeaseDuration = 10 * time.Second
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	c, err := retryq.NewClient(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, client: c, mux: retryq.NewMux()}
	t.Cleanup(e.stop)
	return e
}

func (e *env) startWorker(cfg retryq.WorkerConfig) {
	e.t.Helper()
	if cfg.Handler == nil {
		cfg.Handler = e.mux
	}
	w, err := retryq.NewWorker(e.client, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	prev := e.cancel
	e.cancel = func() {
		cancel()
		if prev != nil {
			prev()
		}
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := w.Run(ctx); err != nil {
			e.t.Errorf("worker: %v", err)
		}
	}()
}

func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
	e.wg.Wait()
	_ = e.client.Close()
	_ = e.st.Close()
}

// waitState polls until the task reaches one of the states or the deadline passes.
func (e *env) waitState(id string, timeout time.Duration, states ...store.State) retryq.TaskInfo {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last retryq.TaskInfo
	for time.Now().Before(deadline) {
		ti, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatalf("get %s: %v", id, err)
		}
		last = ti
		for _, s := range states {
			if ti.State == s {
				return ti
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("task %s: state %s after %s, want %v (last error %+v)", id, last.State, timeout, states, last.LastError)
	return last
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}
