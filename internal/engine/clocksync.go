package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/store"
)

// ClockSyncMode chooses whether the engine corrects its Clock by the
// database server's clock.
//
// On PostgreSQL many nodes write and judge the same times: a task's due
// time is written by the node that enqueued or retried it and judged by
// every fetching node, a lease's expiry is written by the node that holds
// it and judged by the leader's reaper. With each node on its own wall
// clock, a node whose clock runs ahead would reap leases that their
// holders still keep (the task runs twice at once) and run tasks before
// they are due; one that runs behind would hold them back. When the store
// can read the database server's time (store.DatabaseClock), the engine
// measures the offset between its Clock and that time, at Start and then
// every 30 seconds, and adds it to every time it reads from its Clock, so
// that all nodes work on the database's timeline however wrong their own
// clocks are. Timers still use this process's clock, converted. Until a
// first measurement succeeds (when the database was out of reach at
// Start, it is tried every second) the node neither takes the leadership
// nor leases tasks. When the Clock steps between two measurements (it
// moves apart from the process's monotonic clock: an NTP correction, a
// date -s), the engine carries its time forward on the monotonic clock
// instead, measures again at once, and until that succeeds neither takes
// or renews the leadership nor leases tasks nor extends leases.
type ClockSyncMode int

const (
	// ClockSyncAuto is the default: it corrects the system clock and
	// leaves an injected Config.Clock (a test's fake) as it is.
	ClockSyncAuto ClockSyncMode = iota
	// ClockSyncOff never corrects the clock.
	ClockSyncOff
	// ClockSyncOn corrects any Clock, an injected one too.
	ClockSyncOn
)

const (
	// clockSyncInterval is how often the offset is measured again.
	clockSyncInterval = 30 * time.Second
	// clockSyncTimeout bounds one measurement (clockSyncSamples round
	// trips), the one Start waits for included.
	clockSyncTimeout = time.Second
	// clockSyncSamples round trips make one measurement; the one that
	// took the least time gives the estimate.
	clockSyncSamples = 3
	// clockSyncTolerance is how far a new estimate may be from the offset
	// in force, beyond the estimate's own uncertainty, before it replaces
	// it: the engine's time does not wobble with every measurement, and
	// a node on the database's host (or on NTP with it) keeps offset 0.
	clockSyncTolerance = 5 * time.Millisecond
	// clockSkewWarn is the offset from which the correction is logged as a
	// warning: the node's clock is wrong enough to fix.
	clockSkewWarn = time.Second
)

// clockSyncRetryUnsynced is how often the offset is measured while no
// measurement has succeeded yet, or none since the Clock stepped: until
// one does, the engine neither leads nor leases (clockReady).
const clockSyncRetryUnsynced = time.Second

// errClockUnsynced is why a node whose clock is to be synced does not take
// the leadership before the first measurement succeeded, nor after its
// clock stepped until a measurement succeeded again.
var errClockUnsynced = errors.New("this node's clock is not synced with the database server's (its time could not be read since the node started or its clock stepped)")

// clockStepTolerance is how far this node's Clock may move apart from the
// process's monotonic clock since the last measurement before the engine
// takes it for a step (an NTP correction, a date -s, a VM resumed and then
// set right): it stops trusting the offset, works on the monotonic clock
// and measures again at once. Both clocks follow NTP's slewing alike, so
// only a step moves them this far apart.
const clockStepTolerance = 100 * time.Millisecond

// clockSync holds the offset added to the engine's Clock.
type clockSync struct {
	db     store.DatabaseClock // nil: no correction
	system bool                // the Clock is the system clock
	// anchor is the last measurement that succeeded (nil: none yet).
	anchor atomic.Pointer[clockAnchor]
	// stepped is anchor once the Clock was found to have stepped since
	// it; it is ignored once a newer measurement replaced anchor.
	stepped atomic.Pointer[clockAnchor]
	// resync wakes clockLoop to measure at once (after a step).
	resync chan struct{}
}

// clockAnchor is a measurement of the offset: the Clock's and the
// process's readings at one instant, and the offset in force from then on.
type clockAnchor struct {
	local  time.Time     // time.Now(), with its monotonic reading
	clock  time.Time     // the Clock's time then, wall reading only
	offset time.Duration // added to the Clock's time
}

// clockReady reports whether the engine's time is on the database's
// timeline: always when it does not sync its clock, else once a
// measurement succeeded and as long as the Clock has not stepped since.
// Until then the engine neither leads nor leases tasks nor extends leases:
// a node whose clock is minutes off and whose first measurement failed
// (the database was out of reach as it started) would otherwise reap the
// leases other nodes hold, or write leases that are already expired on the
// database's timeline, and tasks would run twice at once.
func (e *Engine) clockReady() bool {
	if e.clock.db == nil {
		return true
	}
	_, ok := e.clockTime()
	return ok
}

// setupClockSync decides whether the engine corrects its clock.
func (e *Engine) setupClockSync() {
	dc, ok := e.st.(store.DatabaseClock)
	if !ok {
		return
	}
	_, system := e.cfg.Clock.(systemClock)
	e.clock.system = system
	e.clock.resync = make(chan struct{}, 1)
	switch e.cfg.ClockSync {
	case ClockSyncOn:
		e.clock.db = dc
	case ClockSyncAuto:
		if system {
			e.clock.db = dc
		}
	}
}

// Now returns the engine's time: its Clock's, corrected by the offset from
// the database server's clock when the engine syncs it (ClockSyncMode).
// Every time the engine writes or compares with the store's (due times,
// lease expiries, attempt times) is of this clock.
func (e *Engine) Now() time.Time { return e.now() }

// now returns the engine's time (Now).
func (e *Engine) now() time.Time {
	t, _ := e.clockTime()
	return t
}

// clockTime returns the engine's time, and whether it is on the database's
// timeline as last measured (clockReady). The time is the Clock's plus the
// offset, unless the Clock stepped since the measurement (it moved apart
// from the process's monotonic clock by more than clockStepTolerance): then
// the offset no longer holds, the time is the measurement's carried
// forward on the monotonic clock, and a new measurement is asked for.
func (e *Engine) clockTime() (time.Time, bool) {
	t := e.cfg.Clock.Now()
	a := e.clock.anchor.Load()
	if a == nil {
		return t, e.clock.db == nil
	}
	local := t
	if !e.clock.system {
		local = time.Now()
	}
	elapsed := local.Sub(a.local)
	if step := t.Round(0).Sub(a.clock) - elapsed; step.Abs() <= clockStepTolerance {
		if a.offset != 0 {
			t = t.Add(a.offset)
		}
		return t, e.clock.stepped.Load() != a
	}
	if old := e.clock.stepped.Swap(a); old != a {
		select {
		case e.clock.resync <- struct{}{}:
		default:
		}
	}
	return a.clock.Add(a.offset + elapsed), false
}

// ClockOffset returns the correction the engine adds to its Clock's time:
// the database server's clock minus this node's, as last measured and
// applied (0 when the engine does not sync its clock, or the two agree to
// within a few milliseconds).
func (e *Engine) ClockOffset() time.Duration {
	if a := e.clock.anchor.Load(); a != nil {
		return a.offset
	}
	return 0
}

// localTime converts at, a time of the engine's clock (a due time or lease
// expiry read from the store), to this process's clock, for a timer: as
// far from time.Now as at is from the engine's Now. Timers run on the
// process's clock, which an injected Clock (corrected or not) need not
// follow; subtracting the offset alone gave a time of the Clock's.
func (e *Engine) localTime(at time.Time) time.Time {
	return time.Now().Add(at.Sub(e.now()))
}

// measureClock estimates the offset between the database server's clock
// and the engine's Clock: of clockSyncSamples round trips, the one that
// took the least time, assuming the server read its clock halfway through.
// The uncertainty is half that round trip (plus the server clock's
// microsecond resolution). Round trips are timed on the process's
// monotonic clock, so a step of the Clock during one does not distort it.
// at is the Clock's and the process's readings as the chosen round trip
// began. A sample that fails (the measurement's time ran out over a long
// round trip) ends it with the samples taken so far; it fails only when
// none was.
func (e *Engine) measureClock(ctx context.Context) (at clockAnchor, uncertainty time.Duration, err error) {
	best := time.Duration(-1)
	for range clockSyncSamples {
		local := time.Now()
		clock := local
		if !e.clock.system {
			clock = e.cfg.Clock.Now()
		}
		db, err := e.clock.db.DatabaseNow(ctx)
		rtt := time.Since(local)
		if err != nil {
			if best >= 0 {
				break
			}
			return clockAnchor{}, 0, err
		}
		if best >= 0 && rtt >= best {
			continue
		}
		best = rtt
		at = clockAnchor{local: local, clock: clock.Round(0), offset: db.Sub(clock.Round(0).Add(rtt / 2))}
	}
	return at, best/2 + time.Microsecond, nil
}

// syncClock measures the offset and applies it when it differs from the
// one in force by more than the measurement can tell apart, or when the
// Clock stepped since the last measurement. It reports whether the
// measurement succeeded.
func (e *Engine) syncClock(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, clockSyncTimeout)
	defer cancel()
	m, unc, err := e.measureClock(ctx)
	if err != nil {
		e.log.Debug("clock sync: could not read the database's time", "err", err)
		return false
	}
	est := m.offset
	var cur time.Duration
	prev := e.clock.anchor.Load()
	if prev != nil {
		cur = prev.offset
	}
	// Fetchers woken while the clock was not ready leased nothing: wake
	// them once it is, or the tasks wait for their poll interval. The
	// check follows the store, so a step found against prev until then
	// is seen.
	defer func() {
		if prev == nil || e.clock.stepped.Load() == prev {
			e.wake.broadcast()
		}
	}()
	if diff := est - cur; diff.Abs() <= unc+clockSyncTolerance {
		// The offset in force (0 before the first measurement) still
		// holds: keep it exactly, from this measurement's readings on.
		m.offset = cur
		e.clock.anchor.Store(&m)
		return true
	}
	e.clock.anchor.Store(&m)
	level := slog.LevelInfo
	if est.Abs() >= clockSkewWarn || (est-cur).Abs() >= clockSkewWarn {
		level = slog.LevelWarn
	}
	e.log.Log(ctx, level, "clock sync: this node's clock differs from the database server's; the engine uses the database's time",
		"node", e.cfg.NodeID, "offset", est.String(), "previous_offset", cur.String(), "uncertainty", unc.String())
	return true
}

// clockLoop measures the offset again every clockSyncInterval (after a
// failure, every tenth of it; every clockSyncRetryUnsynced while none has
// succeeded yet or since the Clock stepped), and at once when the engine
// finds its Clock stepped, so that the engine follows a node clock that
// drifts or is stepped.
func (e *Engine) clockLoop(ctx context.Context, synced bool) {
	timer := time.NewTimer(e.clockSyncWait(synced))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-e.clock.resync:
			timer.Stop()
		}
		timer.Reset(e.clockSyncWait(e.syncClock(ctx)))
	}
}

// clockSyncWait is how long clockLoop waits after a measurement that
// succeeded (ok) or failed.
func (e *Engine) clockSyncWait(ok bool) time.Duration {
	switch {
	case ok:
		return clockSyncInterval
	case !e.clockReady():
		return clockSyncRetryUnsynced
	}
	return clockSyncInterval / 10
}
