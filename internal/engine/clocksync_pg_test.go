package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// dbNow reads the database server's time.
func dbNow(t *testing.T, dc store.DatabaseClock) time.Time {
	t.Helper()
	now, err := dc.DatabaseNow(context.Background())
	if err != nil {
		t.Fatalf("database time: %v", err)
	}
	return now
}

// within fails t unless got is within tol of want.
func within(t *testing.T, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); d.Abs() > tol {
		t.Fatalf("%s: %s, which is %s from the database's %s (tolerance %s)", what, got, d, want, tol)
	}
}

// between fails t unless got lies between from and to, give or take tol:
// a time written or read while from and to were read (or read between
// them). Comparing it with one reading taken later failed whenever the
// calls in between took longer than tol, as on a loaded machine.
func between(t *testing.T, what string, got, from, to time.Time, tol time.Duration) {
	t.Helper()
	if got.Before(from.Add(-tol)) || got.After(to.Add(tol)) {
		t.Fatalf("%s: %s, outside %s..%s (tolerance %s)", what, got, from, to, tol)
	}
}

// nowAgrees fails t unless e's Now agrees within tol with the database's
// clock, read between two of its readings.
func nowAgrees(t *testing.T, e *Engine, dc store.DatabaseClock, tol time.Duration) {
	t.Helper()
	before := e.Now()
	db := dbNow(t, dc)
	between(t, "the database's time, read between two of engine Now", db, before, e.Now(), tol)
}

// heldHandler runs tasks that wait until the test releases them (or their
// context ends), counting runs and stops.
type heldHandler struct {
	started       chan struct{}
	release       chan struct{}
	runs, stopped atomic.Int32
}

func newHeldHandler() *heldHandler {
	return &heldHandler{started: make(chan struct{}, 4), release: make(chan struct{}, 1)}
}

func (h *heldHandler) handle(ctx context.Context, _ *store.Task) error {
	h.runs.Add(1)
	h.started <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		h.stopped.Add(1)
		return ctx.Err()
	}
}

// waitReaperPasses waits for leader to promote two probe tasks enqueued
// through via, each after the call began: the leader's reaper ran at
// least one whole pass since.
func waitReaperPasses(t *testing.T, leader, via *Engine) {
	t.Helper()
	for i := range 2 {
		before := leader.Counters().Promoted
		enqueueScheduled(t, via, "probe", 200*time.Millisecond)
		waitFor(t, fmt.Sprintf("the leader to promote probe %d", i), func() bool { return leader.Counters().Promoted > before })
	}
}

// TestClockSyncCorrectsASkewedClock: a node whose clock is 90 s behind the
// database server's measures the offset at Start and works on the
// database's timeline: its Now, and the times it writes into a task, are
// the database's. Without the sync they were 90 s early.
func TestClockSyncCorrectsASkewedClock(t *testing.T) {
	t.Parallel()
	const skew = -90 * time.Second
	st := openPG(t, pgtest.URL(t))
	e := startWorkerEngine(t, st, Config{NodeID: "skewed", NoScheduler: true, Clock: skewClock(skew), ClockSync: ClockSyncOn})

	if off := e.ClockOffset(); (off + skew).Abs() > time.Second {
		t.Fatalf("ClockOffset = %s, want about %s", off, -skew)
	}
	nowAgrees(t, e, st, time.Second)

	from := dbNow(t, st)
	id := mustEnqueue(t, e, "clock", `{}`)
	to := dbNow(t, st)
	tk := mustGet(t, e, id)
	between(t, "the task's created time", tk.CreatedAt, from, to, 2*time.Second)
	between(t, "the task's run time", tk.RunAt, from, to, 2*time.Second)
}

// TestClockSyncLeavesAgreeingClocksAlone: the engine does not correct an
// injected clock by default (tests' fakes keep their time), nor apply an
// offset it cannot tell from the measurement's noise: the system clock of
// the database's own host stays uncorrected, exactly.
func TestClockSyncLeavesAgreeingClocksAlone(t *testing.T) {
	t.Parallel()
	st := openPG(t, pgtest.URL(t))
	fake := startWorkerEngine(t, st, Config{NodeID: "fake", NoScheduler: true, Clock: skewClock(time.Hour)})
	if off := fake.ClockOffset(); off != 0 {
		t.Fatalf("injected clock, ClockSyncAuto: offset %s, want 0", off)
	}
	if d := time.Until(fake.Now()); d < 59*time.Minute {
		t.Fatalf("injected clock, ClockSyncAuto: Now is %s ahead, want the fake's hour", d)
	}
	off := startWorkerEngine(t, st, Config{NodeID: "off", NoScheduler: true, Clock: skewClock(time.Hour), ClockSync: ClockSyncOff})
	if o := off.ClockOffset(); o != 0 {
		t.Fatalf("ClockSyncOff: offset %s, want 0", o)
	}
	sys := startWorkerEngine(t, st, Config{NodeID: "system", NoScheduler: true})
	for i := range 5 {
		if !sys.syncClock(context.Background()) {
			t.Fatalf("sync %d failed", i)
		}
		if o := sys.ClockOffset(); o != 0 {
			t.Fatalf("system clock on the database's host: offset %s after sync %d, want 0", o, i)
		}
	}
}

// TestSkewedNodesKeepEachOthersLeasesAndDueTimes: two nodes on one
// database, one clock four minutes ahead of the other. The leader (ahead)
// must not reap the lease the worker node (behind) holds and heartbeats,
// and a task delayed by a second on one node must not start earlier on the
// other. Without the sync, the leader reaped the lease at its first pass
// (the handler was stopped and the task ran again) and the delayed task
// started at once.
func TestSkewedNodesKeepEachOthersLeasesAndDueTimes(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	stA, stB := openPG(t, url), openPG(t, url)
	behind := startWorkerEngine(t, stA, Config{NodeID: "behind", NoScheduler: true, Clock: skewClock(-2 * time.Minute), ClockSync: ClockSyncOn, LeaseDuration: 3 * time.Second})
	ahead := startWorkerEngine(t, stB, Config{NodeID: "ahead", Clock: skewClock(2 * time.Minute), ClockSync: ClockSyncOn, LeaderTTL: time.Second})
	waitFor(t, "the node ahead to lead", ahead.IsLeader)

	// A long task held on the node behind.
	h := newHeldHandler()
	runWorker(t, behind, WorkerConfig{Types: []string{"long"}, Concurrency: 1, Handle: h.handle})
	long := mustEnqueue(t, behind, "long", `{}`)
	recvWithin(t, h.started, 10*time.Second, "the long task to start")

	waitReaperPasses(t, ahead, behind)
	if r := ahead.Counters().Reaped; r != 0 || h.stopped.Load() != 0 {
		t.Fatalf("the leader reaped %d leases and %d handlers were stopped; want the held lease kept", r, h.stopped.Load())
	}
	tk := mustGet(t, ahead, long)
	if tk.State != store.StateRunning || tk.Attempt != 1 {
		t.Fatalf("held task: state %s attempt %d, want running attempt 1", tk.State, tk.Attempt)
	}
	close(h.release)
	waitTask(t, ahead, long, "the long task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("the long task ran %d times, want 1", n)
	}

	// A task delayed by a second on the node behind, run by a worker on
	// the node ahead: not before its second.
	ranAt := make(chan time.Time, 1)
	runWorker(t, ahead, WorkerConfig{Types: []string{"delayed"}, Handle: func(context.Context, *store.Task) error {
		ranAt <- time.Now()
		return nil
	}})
	enqueued := time.Now()
	if _, err := behind.Enqueue(context.Background(), EnqueueRequest{Type: "delayed", Delay: time.Second}); err != nil {
		t.Fatalf("enqueue delayed: %v", err)
	}
	at := recvWithin(t, ranAt, 10*time.Second, "the delayed task to run")
	// The sync's uncertainty is half a loopback round trip; 100 ms is far
	// beyond it and far below the skew.
	if early := time.Second - at.Sub(enqueued); early > 100*time.Millisecond {
		t.Fatalf("the task delayed by 1s started %s after its enqueue", at.Sub(enqueued))
	}
}

// aheadDatabase is a PostgreSQL store whose server clock reads ahead of
// this host's by skew: a database server on another machine, whose clock
// differs from the node's.
type aheadDatabase struct {
	*postgres.Store
	skew time.Duration
}

func (a aheadDatabase) DatabaseNow(ctx context.Context) (time.Time, error) {
	now, err := a.Store.DatabaseNow(ctx)
	return now.Add(a.skew), err
}

// TestSyncedSchedulerWakesAtDueTimes: the scheduler sets its timers on this
// process's clock for due times of the engine's (corrected) clock. With the
// database's clock two minutes ahead of the node's and a poll interval of a
// minute, a task delayed by a second is promoted and run at its time; with
// the due time taken as a time of the process's clock, it looked two
// minutes away and waited for the poll.
func TestSyncedSchedulerWakesAtDueTimes(t *testing.T) {
	t.Parallel()
	st := aheadDatabase{Store: openPG(t, pgtest.URL(t)), skew: 2 * time.Minute}
	e := startWorkerEngine(t, st, Config{NodeID: "behind-leader", LeaderTTL: time.Second, PollInterval: time.Minute})
	if off := e.ClockOffset(); (off - st.skew).Abs() > time.Second {
		t.Fatalf("ClockOffset = %s, want about %s", off, st.skew)
	}
	waitFor(t, "the node to lead", e.IsLeader)
	ran := make(chan struct{}, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"due"}, Handle: func(context.Context, *store.Task) error {
		ran <- struct{}{}
		return nil
	}})
	// The scheduler's first pass runs as the node takes the lead, before
	// the task is due: only a timer set for the due time (or the minute's
	// poll) can promote it.
	if _, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "due", Delay: time.Second}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	recvWithin(t, ran, 20*time.Second, "the delayed task to run (well before the minute's poll)")
}

// TestSyncedSchedulerWakesAtDueTimesWithAnInjectedClock: with ClockSyncOn
// the engine corrects an injected Clock too, and the scheduler's timers,
// which run on this process's clock, still fire at the due times. With the
// Clock two minutes ahead of the process's (and of the database's) and a
// poll interval of a minute, a task delayed by a second used to wait for
// the poll: the due time was converted back to the Clock's timeline, two
// minutes after the process's, not to the process's.
func TestSyncedSchedulerWakesAtDueTimesWithAnInjectedClock(t *testing.T) {
	t.Parallel()
	st := openPG(t, pgtest.URL(t))
	e := startWorkerEngine(t, st, Config{NodeID: "ahead-leader", Clock: skewClock(2 * time.Minute), ClockSync: ClockSyncOn,
		LeaderTTL: time.Second, PollInterval: time.Minute})
	if off := e.ClockOffset(); (off + 2*time.Minute).Abs() > time.Second {
		t.Fatalf("ClockOffset = %s, want about -2m", off)
	}
	waitFor(t, "the node to lead", e.IsLeader)
	ran := make(chan struct{}, 1)
	runWorker(t, e, WorkerConfig{Types: []string{"due"}, Handle: func(context.Context, *store.Task) error {
		ran <- struct{}{}
		return nil
	}})
	if _, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "due", Delay: time.Second}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	recvWithin(t, ran, 20*time.Second, "the delayed task to run (well before the minute's poll)")
}

// slowDatabase is a PostgreSQL store whose clock answers each come delay
// late: a database server far away, many milliseconds per round trip.
type slowDatabase struct {
	*postgres.Store
	delay time.Duration
}

func (s slowDatabase) DatabaseNow(ctx context.Context) (time.Time, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-t.C:
	}
	return s.Store.DatabaseNow(ctx)
}

// TestClockSyncOverALongRoundTrip: a measurement whose round trips do not
// all fit its second still corrects the clock by the samples that came
// back. With 400 ms per round trip the third sample ran out of time, and
// the whole measurement was thrown away: a node 90 s off never synced,
// at Start or later.
func TestClockSyncOverALongRoundTrip(t *testing.T) {
	t.Parallel()
	const skew = -90 * time.Second
	st := slowDatabase{Store: openPG(t, pgtest.URL(t)), delay: 400 * time.Millisecond}
	e := startWorkerEngine(t, st, Config{NodeID: "far", NoScheduler: true, Clock: skewClock(skew), ClockSync: ClockSyncOn})
	if off := e.ClockOffset(); (off + skew).Abs() > time.Second {
		t.Fatalf("ClockOffset = %s after Start, want about %s", off, -skew)
	}
	nowAgrees(t, e, st.Store, time.Second)
}

// flakyClockDatabase is a PostgreSQL store whose first fails reads of the
// database's time fail: the database was briefly out of reach as the
// engine started.
type flakyClockDatabase struct {
	*postgres.Store
	fails *atomic.Int32
}

func (f flakyClockDatabase) DatabaseNow(ctx context.Context) (time.Time, error) {
	if f.fails.Add(-1) >= 0 {
		return time.Time{}, store.ErrUnavailable
	}
	return f.Store.DatabaseNow(ctx)
}

// TestNoLeadershipBeforeTheClockIsSynced: a node whose clock is ten minutes
// ahead and whose first measurement at Start failed does not run the
// scheduler on its own clock. Its reaper would find every other node's
// lease ten minutes expired: it took the leadership with the next read of
// the database's time (before the clock loop measured again) and reaped
// the lease a synced node held and heartbeated, stopping the handler and
// running the task twice.
func TestNoLeadershipBeforeTheClockIsSynced(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	holder := startWorkerEngine(t, openPG(t, url), Config{NodeID: "holder", NoScheduler: true, LeaseDuration: 3 * time.Second})
	h := newHeldHandler()
	runWorker(t, holder, WorkerConfig{Types: []string{"long"}, Concurrency: 1, Handle: h.handle})
	long := mustEnqueue(t, holder, "long", `{}`)
	recvWithin(t, h.started, 10*time.Second, "the long task to start")

	fails := new(atomic.Int32)
	fails.Store(1)
	st := flakyClockDatabase{Store: openPG(t, url), fails: fails}
	ahead := startWorkerEngine(t, st, Config{NodeID: "ahead", Clock: skewClock(10 * time.Minute), ClockSync: ClockSyncOn, LeaderTTL: time.Second})
	defer close(h.release)
	waitFor(t, "the node ahead to lead", ahead.IsLeader)
	waitReaperPasses(t, ahead, holder)
	if r := ahead.Counters().Reaped; r != 0 || h.stopped.Load() != 0 {
		t.Fatalf("the leader reaped %d leases and %d handlers were stopped; want the held lease kept", r, h.stopped.Load())
	}
	if off := ahead.ClockOffset(); (off + 10*time.Minute).Abs() > time.Second {
		t.Fatalf("the leader's ClockOffset = %s, want about -10m", off)
	}
	h.release <- struct{}{}
	waitTask(t, holder, long, "the long task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("the long task ran %d times, want 1", n)
	}
}

// TestNoLeasesBeforeTheClockIsSynced: a node whose clock is ten minutes
// behind and whose first measurement at Start failed leases no task until
// a measurement succeeded. A lease it wrote on its own clock had expired
// ten minutes before on the database's: the leader reaped it at its next
// pass, and the task ran again while the first run went on.
func TestNoLeasesBeforeTheClockIsSynced(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	leader := startWorkerEngine(t, openPG(t, url), Config{NodeID: "leader", LeaderTTL: time.Second})
	waitFor(t, "the leader to lead", leader.IsLeader)
	id := mustEnqueue(t, leader, "long", `{}`)

	fails := new(atomic.Int32)
	fails.Store(1)
	st := flakyClockDatabase{Store: openPG(t, url), fails: fails}
	behind := startWorkerEngine(t, st, Config{NodeID: "behind", NoScheduler: true, Clock: skewClock(-10 * time.Minute), ClockSync: ClockSyncOn, LeaseDuration: 3 * time.Second})
	h := newHeldHandler()
	defer close(h.release)
	runWorker(t, behind, WorkerConfig{Types: []string{"long"}, Concurrency: 2, Handle: h.handle})
	recvWithin(t, h.started, 10*time.Second, "the long task to start")
	waitReaperPasses(t, leader, leader)
	if r := leader.Counters().Reaped; r != 0 || h.runs.Load() != 1 {
		t.Fatalf("the leader reaped %d leases and the task ran %d times; want the lease kept and one run", r, h.runs.Load())
	}
	h.release <- struct{}{}
	waitTask(t, leader, id, "the long task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
}
