package loadtest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// Result is what one workload measured.
type Result struct {
	Name     string
	Tasks    int
	Attempts int64
	Elapsed  time.Duration
	// P50 and P99 are nearest-rank percentiles of the time from just before
	// a task's enqueue call (for paced, from its scheduled send instant) to
	// the start of its first handler call, over every task of the run (no
	// warm-up left out), on the monotonic clock.
	P50, P99 time.Duration
	Samples  int    // latency samples (one per task)
	PeakHeap uint64 // peak Go heap in use during the run, bytes
	Counters retryq.Counters
	// Store counts the store's shared write transactions during the run
	// (zero when the store does not count them).
	Store store.GroupStats
	// Pace is how closely a paced run kept its schedule (zero otherwise).
	Pace PaceStats
	// CPU is what the process and the machine used during the run.
	CPU CPUUse
}

// TasksPerSec is the whole-run throughput.
func (r Result) TasksPerSec() float64 { return float64(r.Tasks) / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("%s: %d tasks (%d attempts) in %s = %.0f tasks/s, enqueue->start p50 %s p99 %s (nearest rank of %d samples), peak heap %d MiB",
		r.Name, r.Tasks, r.Attempts, r.Elapsed.Round(time.Millisecond), r.TasksPerSec(),
		r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Samples, r.PeakHeap>>20) +
		r.Pace.String() +
		fmt.Sprintf(" [commits: %d insert (%d tasks, %d dispatched at insert), %d fetch (%d tasks), %d outcome (%d)]",
			r.Counters.InsertCommits, r.Counters.Inserted, r.Counters.Dispatched, r.Counters.Fetches, r.Counters.Fetched,
			r.Counters.OutcomeCommits, r.Counters.Outcomes) +
		fmt.Sprintf(" [store: %d writes in %d transactions]", r.Store.Writes, r.Store.Groups) +
		fmt.Sprintf(" [cpu: %s]", r.CPU.format(r.Tasks))
}

// Options tune a run.
type Options struct {
	Concurrency int // handlers (default 50)
}

// harness runs a client and one worker over a store and records latencies.
type harness struct {
	client  *retryq.Client
	worker  *retryq.Worker
	cancel  context.CancelFunc
	done    chan struct{}
	handled atomic.Int64
	calls   atomic.Int64
	perTask map[string]int // handler calls by task id, guarded by mu
	target  int64
	reached chan struct{}
	once    sync.Once
	mu      sync.Mutex
	lat     []time.Duration
	fail    int // attempts to fail before success
	heap    peakHeap
	st      store.Store
	store0  store.GroupStats // the store's counters when the harness started
	cpu0    cpuSample        // CPU counters when the measured part began
}

// storeStats returns the store's group-commit counters (zero if it keeps none).
func storeStats(st store.Store) store.GroupStats {
	if gc, ok := st.(store.GroupCounter); ok {
		return gc.GroupStats()
	}
	return store.GroupStats{}
}

func newHarness(st store.Store, o Options, target int, failFirst int) (*harness, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 50
	}
	pol := retry.DefaultPolicy()
	pol.Backoff = retry.BackoffFixed
	pol.InitialDelay = time.Millisecond
	pol.Jitter = retry.JitterNone
	pol.MaxAttempts = 10
	c, err := retryq.NewClient(st, retryq.Options{DefaultPolicy: pol, PollInterval: time.Second})
	if err != nil {
		return nil, err
	}
	h := &harness{client: c, target: int64(target), reached: make(chan struct{}), fail: failFirst, lat: make([]time.Duration, 0, target),
		perTask: make(map[string]int, target),
		st:      st, store0: storeStats(st)}
	mux := retryq.NewMux()
	mux.HandleFunc("bench", h.handle)
	w, err := retryq.NewWorker(c, retryq.WorkerConfig{Handler: mux, Concurrency: o.Concurrency})
	if err != nil {
		return nil, err
	}
	h.worker = w
	if err := c.Start(context.Background()); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) startWorker() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		_ = h.worker.Run(ctx)
	}()
}

// handle is the benchmark handler: it records the latency of first
// attempts and fails the first h.fail attempts of every task.
func (h *harness) handle(ctx context.Context, t *retryq.Task) error {
	now := time.Now()
	h.calls.Add(1)
	d, ok := latencyOf(t.Payload, now)
	h.mu.Lock()
	h.perTask[t.ID]++
	if t.Attempt == 1 && ok {
		h.lat = append(h.lat, d)
	}
	h.mu.Unlock()
	if t.Attempt <= h.fail {
		return retry.Transient(fmt.Errorf("attempt %d fails on purpose", t.Attempt))
	}
	if h.handled.Add(1) == h.target {
		h.once.Do(func() { close(h.reached) })
	}
	return nil
}

// wait blocks until every task succeeded once in a handler, then stops the
// worker (flushing outcomes) and the client.
func (h *harness) wait(timeout time.Duration) error {
	defer h.heap.stop()
	select {
	case <-h.reached:
	case <-time.After(timeout):
		h.cancel()
		<-h.done
		h.client.Close()
		return fmt.Errorf("timed out after %s: %d of %d tasks handled", timeout, h.handled.Load(), h.target)
	}
	h.cancel()
	<-h.done
	return h.client.Close()
}

// check checks that each of the n tasks reached the handler exactly want
// times, with one latency sample each (see checkCalls).
func (h *harness) check(n, want int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return checkCalls(h.perTask, len(h.lat), n, want)
}

// peakHeap samples the Go heap every 50ms while a run lasts.
type peakHeap struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
	peak   atomic.Uint64
}

func (p *peakHeap) start() {
	p.stopCh = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > p.peak.Load() {
				p.peak.Store(ms.HeapInuse)
			}
			select {
			case <-p.stopCh:
				return
			case <-t.C:
			}
		}
	}()
}

func (p *peakHeap) stop() {
	if p.stopCh != nil {
		close(p.stopCh)
		p.wg.Wait()
		p.stopCh = nil
	}
}

// verify checks that the store holds n succeeded bench tasks and nothing else.
func verify(ctx context.Context, st store.Store, n int) error {
	stats, err := st.Stats(ctx, store.StatsParams{Since: time.Now().Add(-time.Hour)})
	if err != nil {
		return err
	}
	for _, s := range stats {
		if s.Type != "bench" {
			continue
		}
		if got := s.Counts[store.StateSucceeded]; got != n {
			return fmt.Errorf("verify: %d succeeded tasks in the store, want %d (counts %v)", got, n, s.Counts)
		}
		return nil
	}
	return fmt.Errorf("verify: no bench tasks in the store")
}
