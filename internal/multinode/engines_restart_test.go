package multinode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// envSeed sets the seed of TestEnginesRestartedAtRandom, to replay a run.
const envSeed = "RETRYQ_MULTINODE_SEED"

// TestEnginesRestartedAtRandom runs four engines on one PostgreSQL
// database, each with its own connection pool, an in-process worker and a
// pull worker, the shortest leader TTL and short leases, over a few
// thousand tasks with scripted outcomes (success, transient failures,
// permanent failure, panic, Retry-After, an in-process handler that ignores
// its context past its lease, a pull worker that lets its lease expire and
// reports too late), while the test closes and restarts engines at random
// (the leader among them), cuts an engine's server sessions
// (pg_terminate_backend), freezes an engine's connections for 4.5-9 s (a
// proxy that forwards nothing meanwhile, as a silently cut network path or
// a stopped process would; the leader's half the time), cancels tasks and
// retries cancelled and dead ones. It checks that:
//
//   - every task ends as its script and the test's operations dictate, and
//     the history of each task the test left alone is exactly the handler
//     runs observed (attempt numbers, starts, outcomes, Retry-After delays);
//   - no run of a task started while another run of it still held a valid
//     lease; a pull completion after its lease expired is refused;
//   - at most one engine believes itself leader at any instant (sampled
//     every 2 ms; a frozen leader must stop believing so before another
//     node takes over), and leadership moves within TTL+TTL/4 of the
//     leader's close;
//   - every task finishes after the chaos: the drain fails when no task
//     finishes nor starts an attempt for mnDrainStall;
//   - no task is left running or leased, and no handler is left running.
//
// The seed is logged; set RETRYQ_MULTINODE_SEED to replay it (the
// operations replay; their timing against the engines cannot), and
// RETRYQ_MULTINODE_LOG to a file for the engines' logs. About 25 s with
// -race on 2 cores; -short runs a smaller workload for 3 s.
func TestEnginesRestartedAtRandom(t *testing.T) {
	seed := testSeed(t, envSeed)
	tasks, pullTasks, chaosFor := 3200, 400, 14*time.Second
	if testing.Short() {
		tasks, pullTasks, chaosFor = 300, 60, 3*time.Second
	}
	dbURL := pgtest.URL(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	m := newModel()
	c := &mnCluster{engineSet: engineSet{slots: make([]*engineSlot, mnSlots)}, t: t, url: dbURL, m: m, rng: rand.New(rand.NewPCG(seed, 4))}
	for i := range c.proxies {
		c.proxies[i] = newFreezeProxy(t, hostOf(t, dbURL))
	}
	c.log = engineLogger(t, &m.modelBook)

	// Migrate and configure the types once; the test's own pool stays.
	c.admin = openAdmin(t, dbURL, "mn-test", watchReaps,
		engine.TypeSpec{Type: mnTypeLocal, Policy: mnPolicy(), Timeout: 5 * time.Second},
		engine.TypeSpec{Type: mnTypePull, Policy: mnPolicy(), Timeout: 5 * time.Second})

	// The scripts.
	total := tasks + pullTasks
	m.byIndex = make([][]string, total)
	for i := range total {
		if i < tasks {
			m.byIndex[i] = mnLocalScripts[rng.IntN(len(mnLocalScripts))]
			if rng.IntN(120) == 0 { // as many handler-seconds as 1 in 40 of 1.5 s
				m.byIndex[i] = []string{mnSlow}
			}
		} else {
			m.byIndex[i] = mnPullScripts[rng.IntN(len(mnPullScripts))]
			m.pullIndex[i] = true
		}
	}
	rng.Shuffle(total, func(i, j int) {
		m.byIndex[i], m.byIndex[j] = m.byIndex[j], m.byIndex[i]
		m.pullIndex[i], m.pullIndex[j] = m.pullIndex[j], m.pullIndex[i]
	})

	for i := range mnSlots {
		c.open(i)
	}
	defer func() {
		for i := range mnSlots {
			c.close(i)
		}
	}()
	stopMon, monDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(monDone); c.monitor(stopMon) }()
	var stopMonOnce sync.Once
	endMon := func() { stopMonOnce.Do(func() { close(stopMon) }); <-monDone }
	defer endMon()

	// Producers: enqueue through random live engines over the first part
	// of the chaos, keyed, so that an insert whose answer was lost (the
	// test cut the node's connections) can be sent again.
	reqs := make([]engine.EnqueueRequest, total)
	for i := range total {
		typ := mnTypeLocal
		if m.pullIndex[i] {
			typ = mnTypePull
		}
		reqs[i] = engine.EnqueueRequest{Type: typ, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), IdempotencyKey: fmt.Sprintf("mn-%d", i)}
	}
	prodDone := make(chan struct{})
	var idsMu sync.Mutex
	var ids []string
	go func() {
		defer close(prodDone)
		prng := rand.New(rand.NewPCG(seed, 2))
		produce(t, reqs, 50, c.thawed, prng, func() time.Duration { return time.Duration(prng.IntN(30)) * time.Millisecond },
			func(start int, res []store.InsertResult) {
				m.mu.Lock()
				for j, r := range res {
					m.ids[r.Task.ID] = start + j
				}
				m.mu.Unlock()
				idsMu.Lock()
				for _, r := range res {
					ids = append(ids, r.Task.ID)
				}
				idsMu.Unlock()
			})
	}()

	// Chaos: restart engines (the leader half the time), cancel tasks,
	// retry cancelled and dead ones.
	crng := rand.New(rand.NewPCG(seed, 3))
	chaosEnd := time.Now().Add(chaosFor)
	for n := 0; time.Now().Before(chaosEnd) && n < 100_000; n++ {
		time.Sleep(time.Duration(20+crng.IntN(60)) * time.Millisecond)
		c.thawDue(false)
		live := c.thawed()
		s := live[crng.IntN(len(live))]
		switch k := crng.IntN(20); {
		case k < 4: // restart an engine: the leader when one leads, at random otherwise
			c.restart(crng, live)
		case k < 5 && len(live) == mnSlots: // freeze a node's connections, the leader's half the time
			i := crng.IntN(mnSlots)
			for j, l := range live {
				if l.e.IsLeader() && crng.IntN(2) == 0 {
					i = j
				}
			}
			c.freeze(i, mnFreezeMin+time.Duration(crng.Int64N(int64(mnFreezeMin))))
		case k < 6: // cut a node's connections, the leader's half the time
			// A cut excuses the node's runs within a lease of it (cutNear):
			// one in three, so that with 3 s leases about as many runs are
			// checked as were with 1 s ones.
			if crng.IntN(3) != 0 {
				break
			}
			for _, l := range live {
				if l.e.IsLeader() && crng.IntN(2) == 0 {
					s = l
				}
			}
			c.cut(s)
		case k < 11:
			idsMu.Lock()
			if len(ids) > 0 {
				// Mostly recent tasks, which are more likely unfinished.
				id := ids[max(0, len(ids)-1-crng.IntN(min(len(ids), 150)))]
				idsMu.Unlock()
				c.cancelTask(s, id)
			} else {
				idsMu.Unlock()
			}
		case k < 15:
			c.retryCancelled(s, crng)
		default:
			c.redriveDead(s)
		}
	}
	c.thawDue(true)
	<-prodDone
	if t.Failed() {
		return
	}

	// Drain: every task finishes; the drain fails when none moves for
	// mnDrainStall.
	drain(t, c.admin)
	endMon()
	drained := time.Now()
	for i := range mnSlots {
		c.close(i)
	}
	t.Logf("chaos %s, drained %s after it", chaosFor, drained.Sub(chaosEnd).Round(time.Millisecond))
	m.waitRunsEnded(t)

	for _, e := range c.monErrs {
		t.Error(e)
	}
	var maxTakeover time.Duration
	for _, d := range c.takeovers {
		maxTakeover = max(maxTakeover, d)
	}
	t.Logf("%d leader takeovers, longest %s", len(c.takeovers), maxTakeover)
	if c.leaderSeen == 0 {
		t.Error("no engine ever led")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := c.admin
	var leased int
	if err := st.Pool().QueryRow(ctx, "SELECT count(*) FROM tasks WHERE state = 'running' OR lease_id IS NOT NULL").Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d tasks left running or leased", leased)
	}
	m.checkEnqueued(t, total)
	reaps, err := reapedExpiries(ctx, st)
	if err != nil {
		t.Fatalf("read reaped expiries: %v", err)
	}
	m.check(t, context.Background(), st, reaps) // not ctx: the checks' reads outlast a minute on a loaded machine
}
