package breaker

import (
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
	inFlight    int            // probes let through and not yet answered
	probeOK     int            // probe successes since half-open
	gen         uint64         // bumped at every state change and probe round
}

// Snapshot is a consistent view of a breaker's counters.
type Snapshot struct {
	State               State
	Calls, Failures     int64 // in the sliding window
	ConsecutiveFailures int
	OpenedAt            time.Time // zero if never opened
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

// transitions collects the (at most two) state changes of one call, to be
// reported after the lock is released; a fixed array keeps calls free of
// allocations.
type transitions struct {
	list [2]Transition
	n    int
}

func (b *Breaker) moveTo(to State, now time.Time, reason string, ts *transitions) {
	ts.list[ts.n] = Transition{Name: b.name, From: b.state, To: to, At: now, Reason: reason}
	ts.n++
	b.state = to
	b.gen++
	switch to {
	case Open:
		b.openedAt = now
		b.inFlight, b.probeOK = 0, 0
	case HalfOpen:
		b.lastProbe = now
		b.inFlight, b.probeOK = 0, 0
	case Closed:
		b.consecutive = 0
		b.win.Reset()
	}
}

func (b *Breaker) report(ts *transitions) {
	if b.cfg.OnStateChange == nil {
		return
	}
	for _, t := range ts.list[:ts.n] {
		b.cfg.OnStateChange(t)
	}
}

// advance moves an open breaker whose cool-down has passed to half-open.
func (b *Breaker) advance(now time.Time, ts *transitions) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.CoolDown)) {
		b.moveTo(HalfOpen, now, "cool_down", ts)
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
	var ts transitions
	b.mu.Lock()
	ok, retryAt, _ = b.admit(now, &ts)
	b.mu.Unlock()
	b.report(&ts)
	return ok, retryAt
}

// admit is Allow under the lock; probe reports a call let through as a
// half-open probe.
func (b *Breaker) admit(now time.Time, ts *transitions) (ok bool, retryAt time.Time, probe bool) {
	b.advance(now, ts)
	switch b.state {
	case Closed:
		ok = true
	case Open:
		retryAt = b.openedAt.Add(b.cfg.CoolDown)
	case HalfOpen:
		if b.inFlight >= b.cfg.HalfOpenProbes && !now.Before(b.lastProbe.Add(b.cfg.CoolDown)) {
			// Probes never answered, the newest of them for a whole
			// cool-down: start a new round; their answers, if they ever
			// come, belong to the old one. Timing the round from its
			// newest probe, not its start, gives a probe let through late
			// in the round (after another was answered) a whole cool-down
			// too.
			b.inFlight = 0
			b.gen++
		}
		if b.inFlight < b.cfg.HalfOpenProbes {
			b.inFlight++
			if now.After(b.lastProbe) { // a clock stepped back shortens no wait
				b.lastProbe = now
			}
			ok, probe = true, true
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
	var ts transitions
	b.mu.Lock()
	switch {
	case p != nil && p.gen != b.gen:
		// A call admitted in an earlier state or probe round.
	case b.state == Closed && failed:
		b.consecutive++
		b.win.Add(now, 1, 1)
		if reason := b.tripReason(now); reason != "" {
			b.moveTo(Open, now, reason, &ts)
		}
	case b.state == Closed:
		b.consecutive = 0
		b.win.Add(now, 1, 0)
	case b.state == HalfOpen && b.inFlight > 0 && failed:
		b.moveTo(Open, now, "probe_failed", &ts)
	case b.state == HalfOpen && b.inFlight > 0:
		b.inFlight--
		b.probeOK++
		if b.probeOK >= b.cfg.SuccessesToClose {
			b.moveTo(Closed, now, "probes_succeeded", &ts)
		}
	}
	b.mu.Unlock()
	b.report(&ts)
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
	var ts transitions
	b.mu.Lock()
	b.advance(now, &ts)
	s := b.state
	b.mu.Unlock()
	b.report(&ts)
	return s
}

// Snapshot returns the breaker's state and counters at now (moving it to
// half-open if its cool-down has passed).
func (b *Breaker) Snapshot(now time.Time) Snapshot {
	var ts transitions
	b.mu.Lock()
	b.advance(now, &ts)
	calls, failures := b.win.Sums(now)
	s := Snapshot{State: b.state, Calls: calls, Failures: failures, ConsecutiveFailures: b.consecutive, OpenedAt: b.openedAt}
	b.mu.Unlock()
	b.report(&ts)
	return s
}
