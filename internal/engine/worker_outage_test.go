package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// startedAt runs a worker of typ whose handler reports when each attempt
// starts.
func startedAt(t *testing.T, e *Engine, typ string) <-chan time.Time {
	started := make(chan time.Time, 16)
	runWorker(t, e, WorkerConfig{Types: []string{typ}, Concurrency: 1, Handle: func(context.Context, *store.Task) error {
		started <- time.Now()
		return nil
	}})
	return started
}

// TestWorkerFetchesAtOnceAfterAnOutage: a task enqueued right after the
// store answers again starts within a fraction of a second, however long
// the worker's fetches failed before: the enqueue's wake-up cuts the
// fetch backoff short. After nine failures in a row the worker slept
// 2.56 s (and up to 5 s later) whatever happened meanwhile.
func TestWorkerFetchesAtOnceAfterAnOutage(t *testing.T) {
	backendtest.Run(t, testWorkerFetchesAtOnceAfterAnOutage)
}

func testWorkerFetchesAtOnceAfterAnOutage(t *testing.T, backend string) {
	st := &failingFetches{Store: openWorkerStoreOn(t, backend)}
	st.down.Store(true)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	started := startedAt(t, e, "outage.wake")
	waitFor(t, "nine failed fetches", func() bool { return st.fails.Load() >= 9 })
	st.down.Store(false)
	enqueued := time.Now()
	mustEnqueue(t, e, "outage.wake", `1`)
	at := recvWithin(t, started, 10*time.Second, "the handler to start")
	if d := at.Sub(enqueued); d > 600*time.Millisecond {
		t.Fatalf("the task started %s after its enqueue, after %d failed fetches", d, st.fails.Load())
	}
}

// TestWorkerFetchesWithinASecondOfAnOutageWithoutWakeUps: a task that
// became pending without a wake-up to this engine (another process's
// insert into the SQLite file) starts within about a second of the store
// answering again: the fetch backoff is capped there. It grew to 5 s.
func TestWorkerFetchesWithinASecondOfAnOutageWithoutWakeUps(t *testing.T) {
	st := &failingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	st.down.Store(true)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	started := startedAt(t, e, "outage.quiet")
	if _, err := st.Store.InsertTasks(context.Background(), store.InsertParams{Now: time.Now(),
		Tasks: []store.NewTask{{ID: NewID(time.Now()), Type: "outage.quiet", Payload: []byte(`1`), MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nine failed fetches", func() bool { return st.fails.Load() >= 9 })
	st.down.Store(false)
	up := time.Now()
	at := recvWithin(t, started, 10*time.Second, "the handler to start")
	if d := at.Sub(up); d > 1600*time.Millisecond {
		t.Fatalf("the task started %s after the store answered again, after %d failed fetches", d, st.fails.Load())
	}
}

// TestWorkerFetchRetriesStayBoundedUnderWakeUps: wake-ups cut the backoff
// of a worker whose fetches fail, but not below a floor: a stream of
// enqueues (which commit: only the fetches fail) does not turn the
// worker's retries into a loop of one failed fetch per enqueue.
func TestWorkerFetchRetriesStayBoundedUnderWakeUps(t *testing.T) {
	st := &failingFetches{Store: openWorkerStoreOn(t, "sqlite")}
	st.down.Store(true)
	e := startWorkerEngine(t, st, Config{NoScheduler: true, PollInterval: time.Minute})
	startedAt(t, e, "outage.busy")
	waitFor(t, "a failed fetch", func() bool { return st.fails.Load() >= 1 })
	before, start := st.fails.Load(), time.Now()
	enqueues := 0
	for time.Since(start) < time.Second {
		mustEnqueue(t, e, "outage.busy", `1`)
		enqueues++
	}
	elapsed := time.Since(start)
	n := st.fails.Load() - before
	// One retry per fetchRetryFloor at most, and the backoff's own.
	if limit := int64(elapsed/fetchRetryFloor) + 8; n > limit {
		t.Fatalf("%d failed fetches in %s under %d enqueues, want at most %d", n, elapsed.Round(time.Millisecond), enqueues, limit)
	}
	t.Logf("%d failed fetches in %s under %d enqueues", n, elapsed.Round(time.Millisecond), enqueues)
}
