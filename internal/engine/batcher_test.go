package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// recorder is a batch function that remembers batch sizes and answers each
// request with its own value, failing the ones listed in fail.
type recorder struct {
	mu    sync.Mutex
	sizes []int
	hold  time.Duration // simulated commit time
	fail  map[int]bool
}

func (r *recorder) fn(_ context.Context, reqs []int) ([]int, []error, error) {
	if r.hold > 0 {
		time.Sleep(r.hold)
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, len(reqs))
	r.mu.Unlock()
	res := make([]int, len(reqs))
	errs := make([]error, len(reqs))
	for i, q := range reqs {
		res[i] = q * 10
		if r.fail[q] {
			errs[i] = fmt.Errorf("request %d: %w", q, errTestFail)
		}
	}
	return res, errs, nil
}

var errTestFail = errors.New("test failure")

func startBatcher(t *testing.T, b *batcher[int, int]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestBatcherAnswersEachRequest(t *testing.T) {
	r := &recorder{hold: time.Millisecond, fail: map[int]bool{7: true, 13: true}}
	b := newBatcher(64, 256, r.fn)
	startBatcher(t, b)
	const n = 40
	var wg sync.WaitGroup
	res := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { res[i], errs[i] = b.do(t.Context(), i) })
	}
	wg.Wait()
	for i := range n {
		if r.fail[i] {
			if !errors.Is(errs[i], errTestFail) {
				t.Errorf("request %d: err %v, want %v", i, errs[i], errTestFail)
			}
			continue
		}
		if errs[i] != nil || res[i] != i*10 {
			t.Errorf("request %d: (%d, %v), want (%d, nil)", i, res[i], errs[i], i*10)
		}
	}
	total := 0
	for _, s := range r.sizes {
		total += s
	}
	if total != n {
		t.Fatalf("batches hold %d requests, want %d", total, n)
	}
	if len(r.sizes) == n {
		t.Errorf("%d concurrent requests took %d batches: nothing was coalesced", n, len(r.sizes))
	}
}

// TestBatcherLingerKeepsCallersTogether: callers that each wait for their
// own commit and come straight back end up in the same batches, instead of
// splitting into alternating halves.
func TestBatcherLingerKeepsCallersTogether(t *testing.T) {
	const callers, rounds = 8, 30
	r := &recorder{hold: 2 * time.Millisecond}
	b := newBatcher(64, 256, r.fn)
	b.linger = 20 * time.Millisecond // generous: the race detector slows callers down
	startBatcher(t, b)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range rounds {
				if _, err := b.do(t.Context(), c*1000+i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Skip the first batches, while the callers start one by one.
	steady := r.sizes[min(len(r.sizes), 5):]
	sum := 0
	for _, s := range steady {
		sum += s
	}
	if len(steady) == 0 || float64(sum)/float64(len(steady)) < 0.75*callers {
		t.Fatalf("steady-state batch sizes %v: want about %d (every caller in each batch)", steady, callers)
	}
}

// TestBatcherLoneCallerDoesNotLinger: one caller at a time never waits for
// others, however long the linger bound.
func TestBatcherLoneCallerDoesNotLinger(t *testing.T) {
	r := &recorder{}
	b := newBatcher(64, 256, r.fn)
	b.linger = time.Hour
	startBatcher(t, b)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		if _, err := b.do(ctx, i); err != nil {
			t.Fatalf("request %d: %v (did the batcher linger for a lone caller?)", i, err)
		}
	}
}

// stoppedBatcher returns a batcher whose loop ran and stopped.
func stoppedBatcher(t *testing.T, r *recorder) *batcher[int, int] {
	t.Helper()
	b := newBatcher(64, 256, r.fn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	cancel()
	<-done
	return b
}

// waitAll waits for wg, failing the test if the calls hang.
func waitAll(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s hang", what)
	}
}

// TestBatcherAfterCloseAnswersEveryCall: once the loop stopped, every do
// returns errEngineClosed and every submit runs its callback with it, at
// once. (The queue still had room, so a send used to be as likely as the
// closed signal: about half the calls queued where nobody read.)
func TestBatcherAfterCloseAnswersEveryCall(t *testing.T) {
	b := stoppedBatcher(t, &recorder{})
	const n = 100
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := b.do(context.Background(), i)
			errs <- err
		})
		wg.Go(func() {
			got := make(chan error, 1)
			b.submit(i, func(_ int, err error) { got <- err })
			select {
			case err := <-got:
				errs <- err
			case <-time.After(5 * time.Second):
				errs <- errors.New("submit's callback never ran")
			}
		})
	}
	waitAll(t, &wg, "calls after close")
	close(errs)
	for err := range errs {
		if !errors.Is(err, errEngineClosed) {
			t.Fatalf("call after close: %v, want %v", err, errEngineClosed)
		}
	}
}

// TestBatcherCallsRacingCloseAreAnswered: calls made while the loop stops
// are each either committed or refused with errEngineClosed; none is left
// waiting, and every committed one is in a batch.
func TestBatcherCallsRacingCloseAreAnswered(t *testing.T) {
	r := &recorder{}
	b := newBatcher(8, 16, r.fn) // a small queue: some senders wait for room
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	var committed atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				var err error
				if i%2 == 0 {
					_, err = b.do(context.Background(), g)
				} else {
					got := make(chan error, 1)
					b.submit(g, func(_ int, err error) { got <- err })
					err = <-got
				}
				if errors.Is(err, errEngineClosed) {
					return
				}
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				committed.Add(1)
			}
		})
	}
	waitFor(t, "some commits", func() bool { return committed.Load() > 100 })
	cancel()
	waitAll(t, &wg, "calls racing the close")
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	for _, s := range r.sizes {
		total += s
	}
	if int64(total) != committed.Load() {
		t.Errorf("%d requests committed in batches, %d callers told so", total, committed.Load())
	}
}

// TestEnqueueAfterCloseFails: Enqueue after Close returns ErrClosed at
// once, even with a context that never ends.
func TestEnqueueAfterCloseFails(t *testing.T) { backendtest.Run(t, testEnqueueAfterCloseFails) }

func testEnqueueAfterCloseFails(t *testing.T, backend string) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, backend), Config{NoScheduler: true})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			_, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "x"})
			errs <- err
		})
	}
	waitAll(t, &wg, "enqueues after Close")
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("enqueue after Close: %v, want %v", err, ErrClosed)
		}
	}
}

// slowInserts is a store whose inserts take a few milliseconds, as a commit
// on a slow disk does, and that does not group writes itself (it hides the
// store's GroupCommitter): the engine's own insert batcher coalesces the
// enqueues, with its linger.
type slowInserts struct {
	store.Store
}

func (s slowInserts) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	time.Sleep(2 * time.Millisecond) // the simulated commit, not a synchronization
	return s.Store.InsertTasks(ctx, p)
}

// TestEnqueueLingerKeepsProducersTogether: producers that each wait for
// their own enqueue and come straight back with the next share the
// engine's insert commits, all of them in each, when the store does not
// group writes itself. Enqueue waits through a callback rather than the
// batcher's reply channel, and the linger counted only the latter: it never
// waited for returning producers, which split into alternating halves.
func TestEnqueueLingerKeepsProducersTogether(t *testing.T) {
	st := slowInserts{Store: openWorkerStoreOn(t, "sqlite")}
	if insertLoops(st) != 1 {
		t.Fatal("the wrapped store still groups writes itself")
	}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	e.inserts.linger = 20 * time.Millisecond // generous: the race detector slows producers down
	const producers, rounds = 8, 30
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range rounds {
				if _, err := e.Enqueue(t.Context(), EnqueueRequest{Type: "x", Payload: []byte(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	waitAll(t, &wg, "the producers")
	c := e.Counters()
	if c.Inserted != producers*rounds {
		t.Fatalf("inserted %d tasks, want %d", c.Inserted, producers*rounds)
	}
	if avg := float64(c.Inserted) / float64(c.InsertCommits); avg < 0.75*producers {
		t.Fatalf("%d enqueues took %d commits (%.1f a commit); want about %d a commit (every producer in each)",
			c.Inserted, c.InsertCommits, avg, producers)
	}
}

// TestBatcherStopFlushesInBatches: the calls still queued when the loop
// stops are committed in batches of up to max, as before the stop, not
// one commit each: with the database away, each commit may wait out its
// retries (seconds), and a queue of thousands of outcomes held Close for
// hours.
func TestBatcherStopFlushesInBatches(t *testing.T) {
	gate := make(chan struct{})
	var entered atomic.Bool
	r := &recorder{}
	fn := func(ctx context.Context, reqs []int) ([]int, []error, error) {
		if entered.CompareAndSwap(false, true) {
			<-gate // the first commit is slow: the others queue behind it
		}
		return r.fn(ctx, reqs)
	}
	const max, queued = 8, 40
	b := newBatcher(max, 4*queued, fn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	var answered atomic.Int64
	b.submit(-1, func(int, error) { answered.Add(1) })
	waitFor(t, "the first commit to start", entered.Load)
	for i := range queued {
		b.submit(i, func(_ int, err error) {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			answered.Add(1)
		})
	}
	cancel()
	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not stop")
	}
	if n := answered.Load(); n != queued+1 {
		t.Fatalf("%d calls answered, want %d", n, queued+1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := 1 + (queued+max-1)/max; len(r.sizes) > want {
		t.Fatalf("%d calls queued at the stop took %d commits (sizes %v); want at most %d", queued, len(r.sizes)-1, r.sizes, want-1)
	}
}
