package breaker

import (
	"slices"
	"sync"
	"time"

	"github.com/retryq/retryq/internal/window"
)

// Breaker is a circuit breaker; see the package documentation. Create it
// with [New]; it is safe for concurrent use.
type Breaker struct {
	name string
	cfg  Config

	mu          sync.Mutex
	state       State
	consecutive int
	win         window.Counter // A = calls, B = failures
	openedAt    time.Time      // when the breaker last opened
	lastProbe   time.Time      // when the newest probe of the current round was let through
	out         []uint64       // the ids of the round's probes let through and not yet answered
	lastID      uint64         // the id of the newest probe (ids start at 1)
	probeOK     int            // probe successes since half-open
	gen         uint64         // bumped at every state change and probe round
	pending     []Transition   // state changes not yet passed to OnStateChange
	reporting   bool           // a goroutine is passing pending to OnStateChange
}

// Snapshot is a consistent view of a breaker's counters.
type Snapshot struct {
	State               State     // the state at the time asked for
	Calls, Failures     int64     // in the sliding window
	ConsecutiveFailures int       // failures in a row while closed
	OpenedAt            time.Time // when it last opened; zero if never opened
}

// New returns a closed breaker named name (the name is only reported in
// transitions). cfg's zero fields take their defaults; an invalid cfg is an
// error naming the field.
func New(name string, cfg Config) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &Breaker{name: name, cfg: cfg, win: window.New(cfg.Window, cfg.Buckets)}, nil
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

func (b *Breaker) moveTo(to State, now time.Time, reason string) {
	if b.cfg.OnStateChange != nil {
		b.pending = append(b.pending, Transition{Name: b.name, From: b.state, To: to, At: now, Reason: reason})
	}
	b.state = to
	b.gen++
	switch to {
	case Open:
		b.openedAt = now
		b.out, b.probeOK = b.out[:0], 0
	case HalfOpen:
		b.lastProbe = now
		b.out, b.probeOK = b.out[:0], 0
	case Closed:
		b.consecutive = 0
		b.win.Reset()
		b.out = b.out[:0]
	}
}

// unlock releases b.mu and then passes the pending state changes to
// OnStateChange, in the order they happened and one at a time, without the
// lock held. A goroutine already doing so (in a hook that calls back into
// the breaker, or concurrently) is left to report changes made meanwhile,
// after its own: hooks never run concurrently or out of order, and a hook
// that changes the breaker's state does not deadlock.
func (b *Breaker) unlock() {
	if b.reporting || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	b.reporting = true
	for len(b.pending) > 0 {
		batch := b.pending
		b.pending = nil
		b.mu.Unlock()
		b.deliver(batch)
		b.mu.Lock()
	}
	b.reporting = false
	b.mu.Unlock()
}

// deliver calls OnStateChange for each of ts. If a call panics, reporting
// is handed over (the changes after it are reported by the next call to
// change the state) and the panic goes on.
func (b *Breaker) deliver(ts []Transition) {
	done := 0
	defer func() {
		if done < len(ts) {
			b.mu.Lock()
			b.pending = append(ts[done+1:len(ts):len(ts)], b.pending...)
			b.reporting = false
			b.mu.Unlock()
		}
	}()
	for _, t := range ts {
		b.cfg.OnStateChange(t)
		done++
	}
}

// advance moves an open breaker whose cool-down has passed to half-open.
func (b *Breaker) advance(now time.Time) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.CoolDown)) {
		b.moveTo(HalfOpen, now, "cool_down")
	}
}

// Allow reports whether a call may go ahead at now. When it may not,
// retryAt is the earliest time at which asking again can succeed: the end
// of the cool-down, or, when all probes are out, the time unanswered
// probes are given up on. A caller that gets ok must report the call's
// outcome with [Breaker.Success] or [Breaker.Failure].
//
// Success and Failure cannot tell a probe's answer from the late answer of
// a call let through before the breaker opened. [Breaker.Acquire] returns
// a [Permit] that can, and that can also be released without an outcome.
func (b *Breaker) Allow(now time.Time) (ok bool, retryAt time.Time) {
	b.mu.Lock()
	ok, retryAt, _ = b.admit(now)
	b.unlock()
	return ok, retryAt
}

// admit is Allow under the lock; probe is the id of a call let through as
// a half-open probe, and 0 for any other call.
func (b *Breaker) admit(now time.Time) (ok bool, retryAt time.Time, probe uint64) {
	b.advance(now)
	switch b.state {
	case Closed:
		ok = true
	case Open:
		retryAt = b.openedAt.Add(b.cfg.CoolDown)
	case HalfOpen:
		if len(b.out) >= b.cfg.HalfOpenProbes && !now.Before(b.lastProbe.Add(b.cfg.CoolDown)) {
			// Probes never answered, the newest of them for a whole
			// cool-down: start a new round; their answers, if they ever
			// come, belong to the old one. Timing the round from its
			// newest probe, not its start, gives a probe let through late
			// in the round (after another was answered) a whole cool-down
			// too.
			b.out = b.out[:0]
			b.gen++
		}
		if len(b.out) < b.cfg.HalfOpenProbes {
			b.lastID++
			b.out = append(b.out, b.lastID)
			if now.After(b.lastProbe) { // a clock stepped back shortens no wait
				b.lastProbe = now
			}
			ok, probe = true, b.lastID
		} else {
			retryAt = b.lastProbe.Add(b.cfg.CoolDown)
		}
	}
	return ok, retryAt, probe
}

// Success records a successful call at now. While half-open it counts as
// a probe's success only if a probe is out.
func (b *Breaker) Success(now time.Time) { b.result(now, false, nil) }

// Failure records a failed call at now. Results arriving while the breaker
// is open (from calls allowed before it opened), or while it is half-open
// with no probe out, are ignored.
func (b *Breaker) Failure(now time.Time) { b.result(now, true, nil) }

// result records a call's outcome. A permit's outcome counts only in the
// generation (state and probe round) it was admitted in; an outcome without
// a permit counts in the current state, and while half-open only when a
// probe is out.
func (b *Breaker) result(now time.Time, failed bool, p *Permit) {
	b.mu.Lock()
	switch {
	case p != nil && p.gen != b.gen:
		// A call admitted in an earlier state or probe round.
	case b.state == Closed && failed:
		b.consecutive++
		b.win.Add(now, 1, 1)
		if reason := b.tripReason(now); reason != "" {
			b.moveTo(Open, now, reason)
		}
	case b.state == Closed:
		b.consecutive = 0
		b.win.Add(now, 1, 0)
	case b.state != HalfOpen || !b.answered(p):
		// Open, or no answer of a probe that is out.
	case failed:
		b.moveTo(Open, now, "probe_failed")
	default:
		b.probeOK++
		if b.probeOK >= b.cfg.SuccessesToClose {
			b.moveTo(Closed, now, "probes_succeeded")
		}
	}
	b.unlock()
}

// answered takes an answered probe off the list of probes out: p's, or,
// without a permit, the oldest. It reports false, taking nothing, when
// that probe is not out (p is not a probe of the round, or was answered
// already; or no probe is out).
func (b *Breaker) answered(p *Permit) bool {
	i := 0
	if p != nil {
		i = slices.Index(b.out, p.probe)
	}
	if i < 0 || i >= len(b.out) {
		return false
	}
	b.out = slices.Delete(b.out, i, i+1)
	return true
}

func (b *Breaker) tripReason(now time.Time) string {
	if n := b.cfg.ConsecutiveFailures; n > 0 && b.consecutive >= n {
		return "consecutive_failures"
	}
	if b.cfg.FailureRate >= 0 {
		calls, failures := b.win.Sums(now)
		if failures >= int64(b.cfg.RateMinFailures) && float64(failures) >= b.cfg.FailureRate*float64(calls) {
			return "failure_rate"
		}
	}
	return ""
}

// State returns the state at now, moving an open breaker whose cool-down
// has passed to half-open.
func (b *Breaker) State(now time.Time) State {
	b.mu.Lock()
	b.advance(now)
	s := b.state
	b.unlock()
	return s
}

// Snapshot returns the breaker's state and counters at now (moving it to
// half-open if its cool-down has passed).
func (b *Breaker) Snapshot(now time.Time) Snapshot {
	b.mu.Lock()
	b.advance(now)
	calls, failures := b.win.Sums(now)
	s := Snapshot{State: b.state, Calls: calls, Failures: failures, ConsecutiveFailures: b.consecutive, OpenedAt: b.openedAt}
	b.unlock()
	return s
}
