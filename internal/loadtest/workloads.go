package loadtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
)

const runTimeout = 5 * time.Minute

// Bulk batch-enqueues n tasks (1,000 per transaction), then works them all.
// Elapsed covers insert and work.
func Bulk(st store.Store, n int, o Options) (Result, error) {
	return batched(st, n, o, "bulk", 0)
}

// batched batch-enqueues n tasks whose first failFirst attempts fail, then
// works them all; Elapsed covers insert and work.
func batched(st store.Store, n int, o Options, name string, failFirst int) (Result, error) {
	h, err := newHarness(st, o, n, failFirst)
	if err != nil {
		return Result{}, err
	}
	ctx := context.Background()
	start := h.begin()
	if err := h.enqueueBatches(ctx, n); err != nil {
		h.heap.stop()
		h.client.Close()
		return Result{}, fmt.Errorf("%s enqueue: %w", name, err)
	}
	h.startWorker()
	if err := h.wait(runTimeout); err != nil {
		return Result{}, err
	}
	r := h.result(name, n, start)
	if want := int64((failFirst + 1) * n); r.Attempts != want {
		return r, fmt.Errorf("%s: %d handler calls for %d tasks, want exactly %d: %w", name, r.Attempts, n, want, ErrMeasurement)
	}
	if err := h.check(n, failFirst+1); err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	return r, verify(ctx, st, n)
}

// Stream has `producers` goroutines enqueue n tasks one at a time while the
// worker runs.
func Stream(st store.Store, n, producers int, o Options) (Result, error) {
	h, err := newHarness(st, o, n, 0)
	if err != nil {
		return Result{}, err
	}
	ctx := context.Background()
	h.startWorker()
	start := h.begin()
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		count := n / producers
		if p < n%producers {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < count; i++ {
				if _, err := h.client.Enqueue(ctx, "bench", stamp()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		_ = h.wait(time.Millisecond) // stop the worker; the enqueue error is the one to report
		return Result{}, fmt.Errorf("stream enqueue: %w", err)
	}
	if err := h.wait(runTimeout); err != nil {
		return Result{}, err
	}
	r := h.result("stream", n, start)
	if err := h.check(n, 1); err != nil {
		return r, fmt.Errorf("stream: %w", err)
	}
	return r, verify(ctx, st, n)
}

// Paced enqueues n tasks at a steady rate (tasks per second) from one
// producer while the worker runs; it measures latency when lightly loaded.
// The schedule is open-loop: each task is stamped with its scheduled send
// instant, so a producer held up by a slow enqueue adds the delay to the
// latency of the tasks it sends late (see pacer); Result.Pace shows how
// closely the schedule was kept.
func Paced(st store.Store, n int, rate float64, o Options) (Result, error) {
	h, err := newHarness(st, o, n, 0)
	if err != nil {
		return Result{}, err
	}
	ctx := context.Background()
	h.startWorker()
	start := h.begin()
	pace := newPacer(start, rate)
	for i := 0; i < n; i++ {
		slot := pace.next(i)
		began := time.Now()
		_, err := h.client.Enqueue(ctx, "bench", stampAt(slot))
		pace.sent(began, time.Since(began))
		if err != nil {
			_ = h.wait(time.Millisecond) // stop the worker; the enqueue error is the one to report
			return Result{}, fmt.Errorf("paced enqueue: %w", err)
		}
	}
	if err := h.wait(runTimeout); err != nil {
		return Result{}, err
	}
	r := h.result("paced", n, start)
	r.Pace = pace.result()
	if err := h.check(n, 1); err != nil {
		return r, fmt.Errorf("paced: %w", err)
	}
	return r, verify(ctx, st, n)
}

// Retry batch-enqueues n tasks that each fail twice and then succeed, with a
// 1ms fixed backoff. It checks that every task ran exactly 3 times.
func Retry(st store.Store, n int, o Options) (Result, error) {
	return batched(st, n, o, "retry", 2)
}

// enqueueBatches enqueues n tasks with EnqueueMany, 1,000 per transaction.
func (h *harness) enqueueBatches(ctx context.Context, n int) error {
	batch := make([]retryq.NewTask, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, retryq.NewTask{Type: "bench", Payload: stamp()})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := h.client.EnqueueMany(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

func (h *harness) result(name string, n int, start time.Time) Result {
	r := Result{Name: name, Tasks: n, Attempts: h.calls.Load(), Elapsed: time.Since(start), PeakHeap: h.heap.peak.Load(), Counters: h.client.Counters()}
	now := storeStats(h.st)
	r.Store = store.GroupStats{Groups: now.Groups - h.store0.Groups, Writes: now.Writes - h.store0.Writes}
	r.P50, r.P99 = h.percentiles()
	h.mu.Lock()
	r.Samples = len(h.lat)
	h.mu.Unlock()
	r.CPU = h.cpu0.since()
	return r
}

// begin marks the start of the measured part of a run and returns it: CPU
// use and the peak heap are taken from here (for bulk and retry, through
// the enqueue phase too) until wait.
func (h *harness) begin() time.Time {
	h.cpu0 = takeCPUSample()
	h.heap.start()
	return time.Now()
}

// FillWaiting inserts n tasks of type "waiting" due far in the future, so
// they sit in the retry/delayed queue without being fetched, in batches of
// 5,000 directly through the store.
func FillWaiting(st store.Store, n int) error {
	ctx := context.Background()
	now := time.Now()
	far := now.Add(240 * time.Hour)
	batch := make([]store.NewTask, 0, 5000)
	for i := 0; i < n; i++ {
		batch = append(batch, store.NewTask{ID: fmt.Sprintf("w%09d", i), Type: "waiting", Payload: []byte("{}"), RunAt: far.Add(time.Duration(i) * time.Millisecond)})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := st.InsertTasks(ctx, store.InsertParams{Tasks: batch, Now: now}); err != nil {
				return fmt.Errorf("fill waiting: %w", err)
			}
			batch = batch[:0]
		}
	}
	return nil
}

// ProbeCosts measures one FetchTasks of an empty-handed type, one PromoteDue
// and one NextWakeup against the current table, averaged over reps.
func ProbeCosts(st store.Store, reps int) (fetch, promote, wake time.Duration, err error) {
	ctx := context.Background()
	for i := 0; i < reps; i++ {
		t0 := time.Now()
		if _, err = st.FetchTasks(ctx, store.FetchParams{Types: []string{"bench"}, Limit: 100, WorkerID: "probe", LeaseDuration: time.Minute, Now: time.Now()}); err != nil {
			return
		}
		t1 := time.Now()
		if _, err = st.PromoteDue(ctx, store.PromoteParams{Limit: 1000, Now: time.Now()}); err != nil {
			return
		}
		t2 := time.Now()
		if _, err = st.NextWakeup(ctx, store.WakeupParams{}); err != nil {
			return
		}
		t3 := time.Now()
		fetch += t1.Sub(t0)
		promote += t2.Sub(t1)
		wake += t3.Sub(t2)
	}
	d := time.Duration(reps)
	return fetch / d, promote / d, wake / d, nil
}
