package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// steppedClock is the system clock's wall reading moved by a step that the
// test changes while the engine runs: an NTP correction or a date -s. The
// process's monotonic clock does not see the step, as on a real host.
type steppedClock struct{ step atomic.Int64 }

func (c *steppedClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.step.Load()))
}

// TestClockStepOnTheLeaderReapsNoLiveLease: the leader's wall clock jumps
// ten minutes ahead between two measurements of its offset. Its reaper
// must not find the lease a synced node holds and heartbeats ten minutes
// expired, and the node measures its offset again at once. The engine
// added the offset measured before the step until the next measurement,
// 30 s later: the reaper reaped the lease at its next pass, the handler
// was stopped and the task ran a second time.
func TestClockStepOnTheLeaderReapsNoLiveLease(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	holder := startWorkerEngine(t, openPG(t, url), Config{NodeID: "holder", NoScheduler: true, LeaseDuration: 3 * time.Second})
	clk := new(steppedClock)
	// The default leader TTL (10 s), as in the worker node's test below:
	// renewals cut off after 250 ms (a 1 s TTL) could time out on a loaded
	// machine and leave no leader to run the reaper passes the test waits
	// for. The step stops the renewals only until the offset is measured
	// again, and the bug reaps at the passes while the node leads.
	leader := startWorkerEngine(t, openPG(t, url), Config{NodeID: "stepped-leader", Clock: clk, ClockSync: ClockSyncOn})
	waitFor(t, "the leader to lead", leader.IsLeader)

	h := newHeldHandler()
	defer close(h.release)
	runWorker(t, holder, WorkerConfig{Types: []string{"long"}, Concurrency: 1, Handle: h.handle})
	long := mustEnqueue(t, holder, "long", `{}`)
	recvWithin(t, h.started, 10*time.Second, "the long task to start")

	clk.step.Store(int64(10 * time.Minute))
	waitReaperPasses(t, leader, holder)
	if r := leader.Counters().Reaped; r != 0 || h.stopped.Load() != 0 {
		t.Fatalf("the leader reaped %d leases and %d handlers were stopped; want the held lease kept", r, h.stopped.Load())
	}
	waitFor(t, "the leader to measure its offset again", func() bool {
		return (leader.ClockOffset()+10*time.Minute).Abs() < time.Second && leader.clockReady()
	})
	h.release <- struct{}{}
	waitTask(t, holder, long, "the long task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("the long task ran %d times, want 1", n)
	}
}

// TestClockStepOnAWorkerNodeKeepsItsLeases: a worker node's wall clock
// jumps ten minutes between two measurements while it runs a task. Behind,
// its heartbeats wrote lease expiries ten minutes in the database's past
// and the leader reaped the live lease; ahead, its watchdog found the
// lease ten minutes expired and stopped the handler. Either way the task
// ran again, until the next measurement 30 s later.
func TestClockStepOnAWorkerNodeKeepsItsLeases(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			// The default leader TTL (10 s): the leader takes the lease at
			// once, and its renewals, each cut off after TTL/4, do not time
			// out on a loaded machine and leave no leader to run the reaper
			// passes the test waits for, as 250 ms ones did.
			leader := startWorkerEngine(t, openPG(t, url), Config{NodeID: "leader"})
			waitFor(t, "the leader to lead", leader.IsLeader)
			clk := new(steppedClock)
			st := openPG(t, url)
			worker := startWorkerEngine(t, st, Config{NodeID: "stepped-worker", NoScheduler: true, Clock: clk, ClockSync: ClockSyncOn, LeaseDuration: 3 * time.Second})

			h := newHeldHandler()
			defer close(h.release)
			runWorker(t, worker, WorkerConfig{Types: []string{"long"}, Concurrency: 1, Handle: h.handle})
			long := mustEnqueue(t, leader, "long", `{}`)
			recvWithin(t, h.started, 10*time.Second, "the long task to start")
			first := mustGet(t, leader, long).LeaseExpiresAt

			clk.step.Store(int64(step))
			// Two heartbeats after the step (one every second), then
			// whole reaper passes.
			waitTask(t, leader, long, "two heartbeats", func(tk store.Task) bool {
				return tk.State != store.StateRunning || tk.LeaseExpiresAt.Sub(first) >= 1500*time.Millisecond
			})
			waitReaperPasses(t, leader, leader)
			if r := leader.Counters().Reaped; r != 0 || h.stopped.Load() != 0 || h.runs.Load() != 1 {
				t.Fatalf("the leader reaped %d leases, %d handlers were stopped, the task ran %d times; want the lease kept and one run",
					r, h.stopped.Load(), h.runs.Load())
			}
			// On the database's timeline: live when read, and at most a
			// lease (3 s) past the read. Against one database reading taken
			// after it, a heartbeat a little late and a slow read failed it.
			from := dbNow(t, st)
			tk := mustGet(t, leader, long)
			to := dbNow(t, st)
			between(t, "the lease's expiry", tk.LeaseExpiresAt, from, to.Add(3*time.Second), 2*time.Second)
			h.release <- struct{}{}
			waitTask(t, leader, long, "the long task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
		})
	}
}

// gatedClockDatabase is a SQLite store that tells a database server's time
// (this host's clock), each read waiting for the test's go-ahead once
// gate is set: the test sees the engine between a step and its next
// measurement.
type gatedClockDatabase struct {
	store.Store
	gate atomic.Pointer[chan struct{}]
}

func (g *gatedClockDatabase) DatabaseNow(ctx context.Context) (time.Time, error) {
	if ch := g.gate.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	return time.Now().UTC().Round(time.Microsecond), nil
}

// TestClockStepFollowsTheMonotonicClockUntilMeasured: between a step of
// the Clock and the measurement it triggers, the engine's time is the last
// measurement carried forward on the monotonic clock, not the stepped
// Clock plus an offset that no longer holds, and the node is not ready to
// lease; a step smaller than clockStepTolerance changes nothing. The
// engine took the stepped time for 30 s.
func TestClockStepFollowsTheMonotonicClockUntilMeasured(t *testing.T) {
	t.Parallel()
	st := &gatedClockDatabase{Store: openWorkerStoreOn(t, "sqlite")}
	clk := new(steppedClock)
	e := startWorkerEngine(t, st, Config{NodeID: "stepped", NoScheduler: true, Clock: clk, ClockSync: ClockSyncOn})
	if !e.clockReady() || e.ClockOffset().Abs() > time.Second {
		t.Fatalf("after Start: ready %v, offset %s; want ready, about 0", e.clockReady(), e.ClockOffset())
	}
	gate := make(chan struct{})
	st.gate.Store(&gate)

	clk.step.Store(int64(clockStepTolerance / 2))
	if !e.clockReady() {
		t.Fatal("a step within the tolerance made the clock unready")
	}
	clk.step.Store(int64(time.Hour))
	within(t, "engine Now after the step", e.Now(), time.Now(), time.Second)
	if e.clockReady() {
		t.Fatal("the clock is ready after a step, before a new measurement")
	}
	close(gate)
	waitFor(t, "the clock to be measured again", e.clockReady)
	if off := e.ClockOffset(); (off + time.Hour).Abs() > time.Second {
		t.Fatalf("ClockOffset = %s after the new measurement, want about -1h", off)
	}
	within(t, "engine Now after the measurement", e.Now(), time.Now(), time.Second)
}
