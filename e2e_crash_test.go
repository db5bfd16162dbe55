package retryq_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// The child process of TestWorkerKilledMidTask: a worker whose handler
// announces it started and then hangs until the process is killed.
func init() {
	if os.Getenv("RETRYQ_E2E_CHILD") != "hang-worker" {
		return
	}
	db, marker := os.Getenv("RETRYQ_E2E_DB"), os.Getenv("RETRYQ_E2E_MARKER")
	st := openStore(nopTB{}, db)
	c, err := retryq.NewClient(st, retryq.Options{NodeID: "child", NoScheduler: true, LeaseDuration: 600 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		os.Exit(3)
	}
	_ = c.Start(context.Background())
	mux := retryq.NewMux()
	mux.HandleFunc("crashy", func(ctx context.Context, t *retryq.Task) error {
		_ = os.WriteFile(marker, []byte(t.ID), 0o644)
		select {} // hang until SIGKILL
	})
	w, _ := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux, Concurrency: 1, ID: "child-worker"})
	_ = w.Run(context.Background())
	os.Exit(0)
}

// nopTB lets the child process use openStore outside a test.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                   {}
func (nopTB) Fatalf(string, ...any)     { os.Exit(4) }
func (nopTB) TempDir() string           { return os.TempDir() }
func (nopTB) Cleanup(func())            {}
func (nopTB) Errorf(f string, a ...any) {}

func TestWorkerKilledMidTask(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "retryq.db")
	marker := filepath.Join(dir, "started")
	st := openStore(t, db)
	e := newEnvOn(t, st, retryq.Options{NodeID: "parent", DefaultPolicy: fastPolicy(3), LeaseDuration: 600 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	res, err := e.client.Enqueue(context.Background(), "crashy", map[string]string{"doc": "invoice.pdf"})
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "RETRYQ_E2E_CHILD=hang-worker", "RETRYQ_E2E_DB="+db, "RETRYQ_E2E_MARKER="+marker)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the child worker to start the task", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	// Another worker (this process) now finishes the task once the child's
	// lease has expired and the reaper has applied the retry decision.
	var calls atomic.Int32
	e.mux.HandleFunc("crashy", func(ctx context.Context, task *retryq.Task) error {
		calls.Add(1)
		return nil
	})
	e.startWorker(retryq.WorkerConfig{ID: "survivor"})
	ti := e.waitState(res.Task.ID, 20*time.Second, store.StateSucceeded, store.StateDead)
	if ti.State != store.StateSucceeded || ti.Attempt != 2 || calls.Load() != 1 {
		t.Fatalf("state %s attempt %d calls %d; want succeeded on attempt 2 by the survivor", ti.State, ti.Attempt, calls.Load())
	}
	hist, err := e.client.Attempts(context.Background(), res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Outcome != store.OutcomeLeaseExpired || hist[0].WorkerID != "child-worker" ||
		hist[0].Error == nil || hist[0].Error.Class != "lease_expired" || hist[1].WorkerID != "survivor" {
		t.Fatalf("history = %+v", hist)
	}
}

func TestGracefulShutdownReleasesLeases(t *testing.T) {
	backendtest.Run(t, testGracefulShutdownReleasesLeases)
}

func testGracefulShutdownReleasesLeases(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	started := make(chan string, 1)
	e.mux.HandleFunc("slow", func(ctx context.Context, task *retryq.Task) error {
		started <- task.ID
		<-ctx.Done() // only stops when the worker gives up on it
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := retryq.NewWorker(e.client, retryq.WorkerConfig{Handler: e.mux, ShutdownGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	res, err := e.client.Enqueue(context.Background(), "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop")
	}
	ti, err := e.client.Get(context.Background(), res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ti.State != store.StatePending || ti.Attempt != 0 || ti.LeaseID != "" {
		t.Fatalf("after shutdown: state %s attempt %d lease %q; want pending, 0, released", ti.State, ti.Attempt, ti.LeaseID)
	}
	// Another worker picks it up at once, without waiting for a lease to expire.
	var ran atomic.Bool
	mux := retryq.NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, task *retryq.Task) error { ran.Store(true); return nil })
	e.startWorker(retryq.WorkerConfig{Handler: mux})
	e.waitState(res.Task.ID, 5*time.Second, store.StateSucceeded)
	if !ran.Load() {
		t.Fatal("second worker did not run the task")
	}
}

func TestIdempotentEnqueueCancelAndManualRetry(t *testing.T) {
	backendtest.Run(t, testIdempotentEnqueueCancelAndManualRetry)
}

func testIdempotentEnqueueCancelAndManualRetry(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(1)})
	ctx := context.Background()
	a, err := e.client.Enqueue(ctx, "ocr", map[string]int{"page": 1}, retryq.WithIdempotencyKey("doc-7"), retryq.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.client.Enqueue(ctx, "ocr", map[string]int{"page": 2}, retryq.WithIdempotencyKey("doc-7"))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Duplicate || b.Task.ID != a.Task.ID || a.Duplicate || a.Task.State != store.StateScheduled {
		t.Fatalf("duplicate enqueue: first %+v dup=%v, second id %s dup=%v", a.Task.State, a.Duplicate, b.Task.ID, b.Duplicate)
	}
	if _, err := e.client.Retry(ctx, a.Task.ID); !errors.Is(err, retryq.ErrConflict) {
		t.Fatalf("retrying a scheduled task: %v, want ErrConflict", err)
	}
	c, err := e.client.Cancel(ctx, a.Task.ID)
	if err != nil || c.State != store.StateCancelled {
		t.Fatalf("cancel: %v %s", err, c.State)
	}
	if _, err := e.client.Cancel(ctx, a.Task.ID); !errors.Is(err, retryq.ErrConflict) {
		t.Fatalf("cancelling twice: %v, want ErrConflict", err)
	}
	var calls atomic.Int32
	e.mux.HandleFunc("ocr", func(ctx context.Context, task *retryq.Task) error {
		if calls.Add(1) == 1 {
			return errors.New("first run fails; max attempts is 1")
		}
		return nil
	})
	e.startWorker(retryq.WorkerConfig{})
	r, err := e.client.Retry(ctx, a.Task.ID)
	if err != nil || r.State != store.StatePending {
		t.Fatalf("manual retry of a cancelled task: %v %s", err, r.State)
	}
	e.waitState(a.Task.ID, 10*time.Second, store.StateDead)
	if _, err := e.client.Retry(ctx, a.Task.ID); err != nil {
		t.Fatalf("manual retry of a dead task: %v", err)
	}
	ti := e.waitState(a.Task.ID, 10*time.Second, store.StateSucceeded)
	hist, _ := e.client.Attempts(ctx, a.Task.ID)
	if ti.Attempt != 1 || len(hist) != 2 {
		t.Fatalf("after manual retry: attempt %d (want 1, reset), history %d (want 2, kept)", ti.Attempt, len(hist))
	}
	if _, err := e.client.Get(ctx, "nope"); !errors.Is(err, retryq.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := e.client.Enqueue(ctx, "bad type!", nil); !errors.Is(err, retryq.ErrInvalid) {
		t.Fatalf("bad type: %v", err)
	}
}

func TestDelayedTaskStartsOnTime(t *testing.T) { backendtest.Run(t, testDelayedTaskStartsOnTime) }

func testDelayedTaskStartsOnTime(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{PollInterval: 5 * time.Second}) // polling would be far too slow
	startedAt := make(chan time.Time, 1)
	e.mux.HandleFunc("later", func(ctx context.Context, task *retryq.Task) error {
		startedAt <- time.Now()
		return nil
	})
	e.startWorker(retryq.WorkerConfig{})
	due := time.Now().Add(300 * time.Millisecond)
	if _, err := e.client.Enqueue(context.Background(), "later", nil, retryq.WithRunAt(due)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-startedAt:
		if at.Before(due) {
			t.Fatalf("started %s before it was due", due.Sub(at))
		}
		if late := at.Sub(due); late > 2*time.Second {
			t.Fatalf("started %s late: the scheduler did not wake at the due time", late)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("delayed task did not start before the poll interval: no precise wake-up")
	}
}

func TestRetentionDeletesAndCounts(t *testing.T) { backendtest.Run(t, testRetentionDeletesAndCounts) }

func testRetentionDeletesAndCounts(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{
		DefaultPolicy:      fastPolicy(1),
		SucceededRetention: 50 * time.Millisecond,
		CancelledRetention: time.Hour,
		DeadRetention:      150 * time.Millisecond,
		RetentionInterval:  20 * time.Millisecond,
	})
	ctx := context.Background()
	e.mux.HandleFunc("ok", func(ctx context.Context, task *retryq.Task) error { return nil })
	e.mux.HandleFunc("bad", func(ctx context.Context, task *retryq.Task) error { return retryq.Permanent(errors.New("no")) })
	e.startWorker(retryq.WorkerConfig{})
	ok, _ := e.client.Enqueue(ctx, "ok", nil)
	bad, _ := e.client.Enqueue(ctx, "bad", nil)
	kept, _ := e.client.Enqueue(ctx, "idle", nil)
	if _, err := e.client.Cancel(ctx, kept.Task.ID); err != nil {
		t.Fatal(err)
	}
	gone := func(id string) bool {
		_, err := e.client.Get(ctx, id)
		return errors.Is(err, retryq.ErrNotFound)
	}
	waitFor(t, 10*time.Second, "succeeded and dead tasks to be deleted", func() bool { return gone(ok.Task.ID) && gone(bad.Task.ID) })
	if gone(kept.Task.ID) {
		t.Fatal("a cancelled task was deleted before its (1h) retention")
	}
	// The counters are updated right after the deleting transaction commits.
	waitFor(t, 5*time.Second, "retention counters", func() bool {
		c := e.client.Counters()
		return c.DeletedSucceeded == 1 && c.DeletedDead == 1
	})
	if c := e.client.Counters(); c.DeletedCancelled != 0 {
		t.Fatalf("retention counters %+v", c)
	}
}
