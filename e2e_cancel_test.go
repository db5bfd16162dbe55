package retryq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// Cancelling a running task stops its handler at once: on the node that
// cancels it directly, on the others through the store's cancellation
// notification. The lease here is 30 s, so the heartbeat that would
// otherwise find the lease gone comes only after 10 s; the tests give the
// handler 5 s to stop.

const cancelLease = 30 * time.Second

// blockingHandler registers a handler for typ that reports its start and
// then waits for its context, reporting the cancellation cause.
func blockingHandler(mux *retryq.Mux, typ string) (started chan string, stopped chan error) {
	started, stopped = make(chan string, 1), make(chan error, 1)
	mux.HandleFunc(typ, func(ctx context.Context, task *retryq.Task) error {
		started <- task.ID
		select {
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(time.Minute):
			stopped <- nil
			return nil
		}
	})
	return started, stopped
}

// expectStopped waits for the handler to report that it stopped because
// its task was cancelled.
func expectStopped(t *testing.T, stopped chan error) {
	t.Helper()
	select {
	case cause := <-stopped:
		if cause == nil || !strings.Contains(cause.Error(), "task cancelled") {
			t.Fatalf("handler stopped with cause %v, want the task's cancellation", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler still running 5 s after its task was cancelled")
	}
}

func waitStarted(t *testing.T, started chan string, id string) {
	t.Helper()
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("handler started %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
}

func TestCancelStopsRunningHandler(t *testing.T) { backendtest.Run(t, testCancelStopsRunningHandler) }

func testCancelStopsRunningHandler(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{LeaseDuration: cancelLease})
	started, stopped := blockingHandler(e.mux, "slow")
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	res, err := e.client.Enqueue(context.Background(), "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, started, res.Task.ID)
	ti, err := e.client.Cancel(context.Background(), res.Task.ID)
	if err != nil || ti.State != store.StateCancelled {
		t.Fatalf("cancel: state %s, err %v", ti.State, err)
	}
	expectStopped(t, stopped)
	// The task stays cancelled: the stopped handler records no outcome.
	if ti := e.waitState(res.Task.ID, time.Second, store.StateCancelled); ti.State != store.StateCancelled {
		t.Fatalf("state %s after the handler stopped", ti.State)
	}
	hist, err := e.client.Attempts(context.Background(), res.Task.ID)
	if err != nil || len(hist) != 0 {
		t.Fatalf("history %+v (err %v), want none: the cancelled attempt has no outcome", hist, err)
	}
}

func TestCancelStopsHandlerOnAnotherNode(t *testing.T) {
	url := pgtest.URL(t)
	open := func() store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := postgres.Open(ctx, postgres.Config{URL: url, AutoMigrate: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	runner := newEnvOn(t, open(), retryq.Options{LeaseDuration: cancelLease})
	other := newEnvOn(t, open(), retryq.Options{LeaseDuration: cancelLease})
	// A cancellation sent before the runner's listener listens is lost,
	// and its heartbeat (10 s) would stop the handler only after the 5 s
	// the test allows: the listener's connection may be slower to set up
	// than the enqueue, a poll and the handler's start.
	waitListening(t, url, 2)
	started, stopped := blockingHandler(runner.mux, "slow")
	runner.startWorker(retryq.WorkerConfig{Concurrency: 2})
	res, err := other.client.Enqueue(context.Background(), "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, started, res.Task.ID)
	if _, err := other.client.Cancel(context.Background(), res.Task.ID); err != nil {
		t.Fatal(err)
	}
	expectStopped(t, stopped)
}

// waitListening waits until n sessions of the database at url listen for
// notifications: sessions whose last statement, completed, was a LISTEN
// (a store's listener sends nothing more until its first ping, 30 s on).
func waitListening(t *testing.T, url string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var listening int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query LIKE 'LISTEN %'`).Scan(&listening)
		if err != nil {
			t.Fatalf("waiting for %d listeners: %v", n, err)
		}
		if listening >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d listeners listening after 30 s", listening, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
