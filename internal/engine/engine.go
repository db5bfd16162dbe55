package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

var errEngineClosed = errors.New("engine closed")

// insertLoops is how many enqueue batches may be committing at once: 8 when
// the store folds concurrent writes into shared transactions itself (both
// built-in backends do), else 1, so that concurrent enqueues gather into
// fewer, larger commits (with enqueueLinger).
func insertLoops(st store.Store) int {
	if gc, ok := st.(store.GroupCommitter); ok && gc.GroupCommit() {
		return 8
	}
	return 1
}

// enqueueLinger bounds how long the single enqueue commit loop waits for the
// producers answered by its last commit to come back (see batcher).
const enqueueLinger = 200 * time.Microsecond

// ErrClosed is returned by operations after the engine was closed.
var ErrClosed = errEngineClosed

// Clock tells the time. Tests may inject a fake; timers always use real time.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// lockedRand serializes the calls to an injected Rand: Decide runs on
// every worker, pull request and the reaper at once, and a seeded
// *rand.Rand (a deterministic source for tests) is not safe for
// concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  retry.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// Config configures an Engine. Zero fields take the documented defaults.
type Config struct {
	Store  store.Store
	Logger *slog.Logger // default: discard
	Clock  Clock        // default: system clock
	Rand   retry.Rand   // default: math/rand/v2 global source; an injected one is called by one goroutine at a time
	// ClockSync chooses whether Clock is corrected by the database
	// server's clock (PostgreSQL). Default ClockSyncAuto: the system clock
	// is, an injected one is not.
	ClockSync ClockSyncMode

	NodeID  string // default: host-pid-random
	Version string // recorded in the node registry

	// DefaultPolicy applies to task types with no stored policy, or a zero one.
	DefaultPolicy retry.Policy // default: retry.DefaultPolicy()
	// DefaultTimeout is the per-attempt timeout of types that set none. Default 5m.
	DefaultTimeout time.Duration
	// LeaseDuration is the lease granted to in-process workers; heartbeats
	// extend it every third of it. Default 30s.
	LeaseDuration time.Duration
	// PollInterval bounds how long fetchers and the scheduler sleep without a
	// wake-up (the fallback for lost notifications). Default 1s; at least
	// MinPollInterval.
	PollInterval time.Duration

	// Retention: finished tasks are deleted this long after their last
	// update. Zero takes the default; a negative value keeps them forever.
	SucceededRetention time.Duration // default 24h
	CancelledRetention time.Duration // default 24h
	DeadRetention      time.Duration // default 30 days
	RetentionInterval  time.Duration // default 1m; at least MinRetentionInterval
	// NodeRetention: the node registry's row of a node not seen for this
	// long (stopped, or died) is deleted at the leader's retention passes,
	// so that restarts, each a new node id by default, do not pile up rows.
	// Zero takes the default (7 days); a negative value keeps them forever;
	// a positive one is at least MinNodeRetention.
	NodeRetention time.Duration

	// LeaderTTL is the leadership lease of the scheduler loops. Default
	// 10s; at least MinLeaderTTL.
	LeaderTTL time.Duration
	// NoScheduler disables the scheduler loops (and the election) on this node.
	NoScheduler bool

	// MaxEnqueueBatch caps how many coalesced enqueues share one commit. Default 1000.
	MaxEnqueueBatch int
	// MaxOutcomeBatch caps how many outcomes share one commit. Default 1000.
	MaxOutcomeBatch int

	// MaxLongPolls caps the pull lease requests waiting for work at once
	// on this node (long polls). Each holds a goroutine and a connection,
	// and queries the store at every wake-up. A request over the cap is
	// answered at once: with the tasks due now, or, when there are none,
	// with ErrTooManyLongPolls. Default DefaultMaxLongPolls.
	MaxLongPolls int
}

// DefaultMaxLongPolls is the default of Config.MaxLongPolls.
const DefaultMaxLongPolls = 512

// DefaultNodeRetention is how long the node registry keeps the row of a
// node no longer seen, unless Config.NodeRetention says otherwise.
const DefaultNodeRetention = 7 * 24 * time.Hour

// Bounds of Config's durations.
const (
	// MinLeaderTTL is the shortest LeaderTTL. The leader renews its lease
	// every quarter of it, each renewal bounded by that quarter: with a far
	// shorter lease no renewal finishes in time, no node ever leads, and
	// delayed tasks and retries are never run.
	MinLeaderTTL = time.Second
	// MinPollInterval is the shortest PollInterval: every fetcher and the
	// scheduler query the database at least this often when idle, so a
	// far shorter one (1ns, a unit forgotten) keeps the database busy
	// answering idle polls.
	MinPollInterval = 10 * time.Millisecond
	// MinLeaseDuration is the shortest LeaseDuration: heartbeats extend a
	// lease every third of it.
	MinLeaseDuration = 3 * time.Millisecond
	// MinRetentionInterval is the shortest RetentionInterval. Each
	// retention pass is a write transaction or two, and the scheduler
	// wakes for the next one: with a far shorter interval (1ns) it ran
	// pass after pass with no pause.
	MinRetentionInterval = MinPollInterval
	// MinNodeRetention is the shortest positive NodeRetention. A live node
	// writes its registry row every 5 s and counts as alive for 30 s after
	// each write: a shorter retention deleted the rows of live nodes (the
	// leader's own among them) at every retention pass.
	MinNodeRetention = time.Minute
)

// configErr is an invalid Config field: an ErrInvalid naming it.
func configErr(field, format string, args ...any) error {
	return fmt.Errorf("engine config: %w", fieldErr(field, format, args...))
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Store == nil {
		return out, configErr("Store", "is required")
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Clock == nil {
		out.Clock = systemClock{}
	}
	if out.Rand == nil {
		out.Rand = globalRand{}
	} else if _, ok := out.Rand.(*lockedRand); !ok {
		out.Rand = &lockedRand{r: out.Rand}
	}
	if out.ClockSync < ClockSyncAuto || out.ClockSync > ClockSyncOn {
		return out, configErr("ClockSync", "must be ClockSyncAuto, ClockSyncOff or ClockSyncOn (got %d)", out.ClockSync)
	}
	if out.NodeID == "" {
		host, _ := os.Hostname()
		out.NodeID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if isZeroPolicy(out.DefaultPolicy) {
		out.DefaultPolicy = retry.DefaultPolicy()
	} else {
		out.DefaultPolicy = out.DefaultPolicy.WithDefaults()
	}
	if err := out.DefaultPolicy.Validate(); err != nil {
		return out, fmt.Errorf("engine config: %w", &FieldError{Field: "DefaultPolicy", Message: err.Error(), Err: err})
	}
	for _, f := range []struct {
		d        *time.Duration
		def, min time.Duration
		name     string
	}{
		{&out.DefaultTimeout, 5 * time.Minute, 1, "DefaultTimeout"},
		{&out.LeaseDuration, 30 * time.Second, MinLeaseDuration, "LeaseDuration"},
		{&out.PollInterval, time.Second, MinPollInterval, "PollInterval"},
		{&out.RetentionInterval, time.Minute, MinRetentionInterval, "RetentionInterval"},
		{&out.LeaderTTL, 10 * time.Second, MinLeaderTTL, "LeaderTTL"},
	} {
		if *f.d == 0 {
			*f.d = f.def
		}
		if *f.d < f.min {
			return out, configErr(f.name, "must be at least %s, or 0 for the default %s (got %s)", f.min, f.def, *f.d)
		}
	}
	if out.SucceededRetention == 0 {
		out.SucceededRetention = 24 * time.Hour
	}
	if out.CancelledRetention == 0 {
		out.CancelledRetention = 24 * time.Hour
	}
	if out.DeadRetention == 0 {
		out.DeadRetention = 30 * 24 * time.Hour
	}
	if out.NodeRetention == 0 {
		out.NodeRetention = DefaultNodeRetention
	}
	if out.NodeRetention > 0 && out.NodeRetention < MinNodeRetention {
		return out, configErr("NodeRetention", "must be at least %s, 0 for the default %s, or negative to keep the rows forever (got %s)",
			MinNodeRetention, RetentionText(DefaultNodeRetention), out.NodeRetention)
	}
	if out.MaxEnqueueBatch <= 0 {
		out.MaxEnqueueBatch = 1000
	}
	if out.MaxOutcomeBatch <= 0 {
		out.MaxOutcomeBatch = 1000
	}
	if out.MaxLongPolls < 0 {
		return out, configErr("MaxLongPolls", "must be at least 1, or 0 for the default %d (got %d)", DefaultMaxLongPolls, out.MaxLongPolls)
	}
	if out.MaxLongPolls == 0 {
		out.MaxLongPolls = DefaultMaxLongPolls
	}
	return out, nil
}

func isZeroPolicy(p retry.Policy) bool {
	return p.Backoff == "" && p.InitialDelay == 0 && p.Multiplier == 0 && p.MaxDelay == 0 &&
		p.MaxDoublings == 0 && p.Jitter == "" && p.JitterFraction == 0 && p.MaxAttempts == 0 &&
		p.RetryWindow == 0 && len(p.RetryOn) == 0 && len(p.NoRetryOn) == 0
}

// Engine is the durable task engine. Create it with New, start it with Start
// and stop it with Close.
type Engine struct {
	cfg   Config
	st    store.Store
	log   *slog.Logger
	types *typeCache

	wake     *broadcaster // wakes fetchers: tasks may be due
	sched    *schedPoke   // wakes the scheduler: a retry or lease deadline appeared
	inserts  *batcher[*insertCall, store.InsertResult]
	outcomes *batcher[store.Outcome, struct{}]
	leases   *leaseTable
	push     *pusher // push-target deliveries (push.go)
	retained retentionCounts
	ctr      counters
	locals   locals
	clock    clockSync

	leading  leaderState
	holder   string // the leadership lease's holder name (newHolder)
	startMu  sync.Mutex
	started  bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	loopsCtx context.Context

	// running are the stop functions of the in-process workers running
	// (RunWorker); Close stops them first, and refuses new ones once
	// closing is set.
	runMu   sync.Mutex
	running map[*workerRun]context.CancelFunc
	closing bool
	runWG   sync.WaitGroup

	// pollsEnded is closed by EndLongPolls: waiting pull leases answer.
	pollsEnded   chan struct{}
	endPollsOnce sync.Once
	longPolls    atomic.Int64 // pull leases in their wait
	pulled       pullLeases   // pull leases handed out and not yet reported (pull_reports.go)

	// gracesEnded is closed by EndGraces: Close's graces end at once.
	gracesEnded   chan struct{}
	endGracesOnce sync.Once
}

// LongPolls returns how many pull leases (LeaseRequest.Wait > 0) are
// waiting for tasks now.
func (e *Engine) LongPolls() int { return int(e.longPolls.Load()) }

// EndLongPolls answers the pull leases waiting for tasks (LeaseRequest.Wait)
// at once, with what they have (nothing), and makes later ones lease
// nothing (see Lease). A server calls it when it begins to shut down: a long poll holds
// no task, and must not hold the shutdown for its whole wait. Close calls
// it too.
func (e *Engine) EndLongPolls() { e.endPollsOnce.Do(func() { close(e.pollsEnded) }) }

// BeginShutdown makes the node take no new work while the caller drains
// what it serves (a server's HTTP requests), without waiting for anything:
// it ends the long polls (EndLongPolls) and stops the push fetchers, so
// that no push task is leased only to be given back at Close. A push fetch
// already sent finishes and what it leased is released (pending again, the
// attempt not counted); deliveries in flight go on, and Close gives them
// their grace. In-process workers are stopped by Close. It is idempotent.
func (e *Engine) BeginShutdown() {
	e.EndLongPolls()
	e.push.stopFetching()
}

// EndGraces ends the graces Close gives work in flight, now or when Close
// comes to them: in-process workers' running handlers are cancelled as at
// the end of their ShutdownGrace, and push deliveries as at the end of
// theirs; each gives its task back (pending again, the attempt not
// counted). A server calls it when its shutdown timeout nears, so that
// what runs is released rather than left to its lease's expiry. It does
// not wait (Close does) and is idempotent.
func (e *Engine) EndGraces() { e.endGracesOnce.Do(func() { close(e.gracesEnded) }) }

// track registers a worker about to run and returns the context it runs
// under, which Close cancels; untrack is called when it has stopped. It
// fails once the engine is closing.
func (e *Engine) track(ctx context.Context, w *workerRun) (context.Context, error) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.closing {
		return nil, ErrClosed
	}
	ctx, stop := context.WithCancel(ctx)
	if e.running == nil {
		e.running = make(map[*workerRun]context.CancelFunc)
	}
	e.running[w] = stop
	e.runWG.Add(1)
	return ctx, nil
}

func (e *Engine) untrack(w *workerRun) {
	e.runMu.Lock()
	stop := e.running[w]
	delete(e.running, w)
	e.runMu.Unlock()
	stop()
	e.runWG.Done()
}

// stopWorkers stops the running in-process workers as if their contexts
// were cancelled (each finishes or releases its tasks within its
// ShutdownGrace and flushes its outcomes) and waits for them.
func (e *Engine) stopWorkers() {
	e.runMu.Lock()
	e.closing = true
	for _, stop := range e.running {
		stop()
	}
	e.runMu.Unlock()
	e.runWG.Wait()
}

// New validates cfg and returns an engine that is not yet running.
func New(cfg Config) (*Engine, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:    c,
		st:     c.Store,
		log:    c.Logger,
		wake:   newBroadcaster(),
		sched:  newSchedPoke(),
		leases: newLeaseTable(),

		pollsEnded:  make(chan struct{}),
		gracesEnded: make(chan struct{}),
	}
	e.leading.changed = make(chan struct{}, 1)
	e.holder = newHolder(c.NodeID)
	e.setupClockSync()
	e.types = newTypeCache(e)
	e.push = newPusher(e)
	e.inserts = newBatcher(c.MaxEnqueueBatch, 4*c.MaxEnqueueBatch, e.commitInserts)
	if insertLoops(e.st) == 1 {
		// One enqueue batch commits at a time: let producers that wait on
		// their own commit catch the next one together (see batcher).
		e.inserts.linger = enqueueLinger
	}
	e.outcomes = newBatcher(c.MaxOutcomeBatch, 4*c.MaxOutcomeBatch, e.commitOutcomes)
	return e, nil
}

// Config returns the engine's effective configuration (defaults applied).
func (e *Engine) Config() Config { return e.cfg }

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.st }

// NodeID returns this node's id.
func (e *Engine) NodeID() string { return e.cfg.NodeID }

// Start launches the commit loops, the node heartbeat and (unless
// NoScheduler) the leader election that runs the scheduler loops. When the
// engine syncs its clock with the database's (ClockSyncMode) it first
// measures the offset, waiting up to a second for it; otherwise it returns
// at once. Close stops everything.
func (e *Engine) Start(ctx context.Context) error {
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started {
		return errors.New("start engine: already started")
	}
	e.started = true
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.loopsCtx = ctx
	if e.clock.db != nil {
		// Before anything is written, so that this node's first due times
		// and leases are on the database's timeline too.
		synced := e.syncClock(ctx)
		e.goLoop(func() { e.clockLoop(ctx, synced) })
	}
	// Several commit loops share the enqueue queue: while one batch commits,
	// the next can already be on its way, so the store (or PostgreSQL's own
	// group commit) can fold them into one fsync.
	for i := 0; i < insertLoops(e.st); i++ {
		e.goLoop(func() { e.inserts.run(ctx) })
	}
	e.goLoop(func() { e.outcomes.run(ctx) })
	e.goLoop(func() { e.heartbeatLoop(ctx) })
	e.goLoop(func() { e.leaseWatchdog(ctx) })
	e.goLoop(func() { e.nodeLoop(ctx) })
	if n, ok := e.st.(store.Notifier); ok {
		e.goLoop(func() { e.notifyLoop(ctx, n) })
	}
	if !e.cfg.NoScheduler {
		e.goLoop(func() { e.electionLoop(ctx) })
	}
	e.push.start(ctx) // push targets, on every node
	return nil
}

func (e *Engine) goLoop(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Close stops the engine: first its in-process workers, as if their
// contexts were cancelled (each waits for its handlers up to its
// ShutdownGrace, releases what it cannot finish, and flushes its outcomes),
// then its loops, after flushing queued commits. RunWorker fails with
// ErrClosed afterwards. Do not call Close from a handler: it waits for the
// handler to return. It does not close the store.
func (e *Engine) Close() error {
	e.startMu.Lock()
	cancel := e.cancel
	e.startMu.Unlock()
	// In-process workers and push deliveries first: they release or record
	// their outcomes through the commit loops, which stop below.
	e.EndLongPolls()
	e.stopWorkers()
	e.push.stop()
	if cancel != nil {
		cancel()
	}
	e.wg.Wait()
	return nil
}

// debugging reports whether per-task debug lines are logged: the hot paths
// check it first, since building a log call's arguments allocates even when
// the level is off.
func (e *Engine) debugging() bool {
	return e.log.Enabled(context.Background(), slog.LevelDebug)
}

// notifyLoop turns cross-process notifications into local wake-ups, and
// cancellations of running tasks into stopped handlers.
func (e *Engine) notifyLoop(ctx context.Context, n store.Notifier) {
	var cancels <-chan store.LeaseRef
	if cn, ok := n.(store.CancelNotifier); ok {
		cancels = cn.Cancellations(ctx)
	}
	// A notification that names the types of the tasks it is for wakes
	// only their fetchers: with many types, every fetcher of every node
	// queried the database after every insert anywhere.
	var ch <-chan struct{}
	var due *store.DueTypes
	if tn, ok := n.(store.TypedNotifier); ok {
		ch, due = tn.TypedWakeups(ctx)
	} else {
		ch = n.Wakeups(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			if due == nil {
				e.wake.broadcast()
			} else if types, all := due.Take(); all {
				e.wake.broadcast()
			} else if len(types) > 0 {
				e.wake.broadcastTypes(types)
			}
			e.sched.poke(time.Time{})
		case ref, ok := <-cancels:
			if !ok {
				cancels = nil
				continue
			}
			e.leases.cancelled(ref.TaskID, ref.LeaseID)
		}
	}
}
