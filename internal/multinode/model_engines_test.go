package multinode

// The engines of the two randomized model tests and what both do with
// them: the test's own pool, an engine with its own pool and workers in a
// slot, the producer, the pull loop.

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// openAdmin opens the test's own pool on dbURL as application app,
// migrates the schema, runs setup (the test's triggers) and stores the
// types; the pool closes when the test ends.
func openAdmin(t *testing.T, dbURL, app string, setup func(context.Context, *postgres.Store) error, types ...engine.TypeSpec) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: withAppName(t, dbURL, app), AutoMigrate: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := setup(ctx, st); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Store: st, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range types {
		if _, err := e.PutType(ctx, spec); err != nil {
			t.Fatalf("put type %s: %v", spec.Type, err)
		}
	}
	return st
}

// engineSlot is one engine of a model test with its own connection pool,
// an in-process worker and pull loops.
type engineSlot struct {
	node   string
	st     *postgres.Store
	e      *engine.Engine
	cancel context.CancelFunc
	done   sync.WaitGroup // the worker and the pull loops
}

// slotSpec says how a model test opens an engine in a slot.
type slotSpec struct {
	url    string              // the database (application_name is set to the node, to find its sessions)
	engine engine.Config       // Store and NodeID are set by openSlot
	worker engine.WorkerConfig // the in-process worker; ID is set to the node + "/w"
	pulls  int                 // how many pull loops run pull
	pull   func(ctx context.Context, s *engineSlot)
}

// openSlot opens and starts node's store, engine, worker and pull loops.
func openSlot(t *testing.T, node string, spec slotSpec) *engineSlot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: withAppName(t, spec.url, node), MaxConns: 6,
		ReconnectMax: 200 * time.Millisecond, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("open store for %s: %v", node, err)
	}
	cfg := spec.engine
	cfg.Store, cfg.NodeID = st, node
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := &engineSlot{node: node, st: st, e: e}
	wctx, wcancel := context.WithCancel(context.Background())
	s.cancel = wcancel
	s.done.Add(1 + spec.pulls)
	wcfg := spec.worker
	wcfg.ID = node + "/w"
	go func() {
		defer s.done.Done()
		if err := e.RunWorker(wctx, wcfg); err != nil {
			t.Errorf("worker of %s: %v", node, err)
		}
	}()
	for range spec.pulls {
		go func() {
			defer s.done.Done()
			spec.pull(wctx, s)
		}()
	}
	return s
}

// stop stops s's workers, then closes its engine and store.
func (s *engineSlot) stop() {
	s.cancel()
	s.done.Wait()
	_ = s.e.Close()
	_ = s.st.Close()
}

// pullLoop leases tasks on s with req (its WorkerID set to the node +
// "/pull") and hands each batch to run until ctx ends. A lease cut off
// (the pool reconnects) or timed out (a new connection through a frozen
// path: a plain deadline, not ErrUnavailable) is tried again after 20 ms;
// any other error ends the loop, and fails the test unless ctx ended.
func (s *engineSlot) pullLoop(ctx context.Context, t *testing.T, req engine.LeaseRequest, run func([]store.Task)) {
	req.WorkerID = s.node + "/pull"
	for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
		tasks, err := s.e.Lease(ctx, req)
		if unavailable(err) || errors.Is(err, context.DeadlineExceeded) {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("pull lease on %s: %v", s.node, err)
			}
			return
		}
		run(tasks)
	}
}

// engineSet is a model test's engines by slot (nil: closed). mu guards
// the slots and gen, and whatever else the test's cluster keeps beside
// them.
type engineSet struct {
	mu    sync.Mutex
	slots []*engineSlot
	gen   int // engines opened so far, for unique node names
}

// nextGen counts an engine about to open and returns its number.
func (c *engineSet) nextGen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	return c.gen
}

// put places s in slot i.
func (c *engineSet) put(i int, s *engineSlot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slots[i] = s
}

// take empties slot i and returns what it held (nil: nothing).
func (c *engineSet) take(i int) *engineSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[i]
	c.slots[i] = nil
	return s
}

// live returns the open engines.
func (c *engineSet) live() []*engineSlot { return c.liveWhere(nil) }

// liveWhere returns the open engines whose slot keep (called with mu
// held; nil: any) accepts.
func (c *engineSet) liveWhere(keep func(i int) bool) []*engineSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*engineSlot
	for i, s := range c.slots {
		if s != nil && (keep == nil || keep(i)) {
			out = append(out, s)
		}
	}
	return out
}

// produce enqueues reqs in batches of batch, each through an engine that
// engines returns, picked with rng (keyed requests: any failure, closed,
// cut off or frozen, is sent again, up to 50 tries; with no engine it
// waits 20 ms); it passes each batch's results to note with the index of
// its first request, and sleeps pause() between batches. It fails the
// test at a batch that never got in, and stops.
func produce(t *testing.T, reqs []engine.EnqueueRequest, batch int, engines func() []*engineSlot, rng *rand.Rand,
	pause func() time.Duration, note func(start int, res []store.InsertResult)) {
	for start := 0; start < len(reqs); start += batch {
		end := min(start+batch, len(reqs))
		var res []store.InsertResult
		var err error
		for try := 0; try < 50; try++ {
			live := engines()
			if len(live) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err = live[rng.IntN(len(live))].e.EnqueueMany(ctx, reqs[start:end])
			cancel()
			if err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("enqueue at %d: %v", start, err)
			return
		}
		note(start, res)
		time.Sleep(pause())
	}
}

// withAppName returns url with application_name set to name, so that the
// test can find the node's server sessions.
func withAppName(t *testing.T, raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// hostOf returns the host:port of a database URL.
func hostOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func unavailable(err error) bool { return errors.Is(err, store.ErrUnavailable) }

func sleepCtx(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
