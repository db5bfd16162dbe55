// Package outage decides how to log the failures of a call that is made
// again and again (a fetch loop, a scheduler pass, API requests) while its
// dependency, the database, is away: once per outage rather than at every
// attempt, with a reminder at most once per interval, and with outages
// that keep coming back (a flapping database) warned about at most once
// per interval too.
package outage

import (
	"sync"
	"time"
)

// DefaultEvery is the reminder interval of a Tracker whose Every is zero:
// how often a call that keeps failing, or an outage that keeps coming
// back, is warned about again.
const DefaultEvery = time.Minute

// Step says how to log a failure.
type Step int

const (
	// First is a failure that begins an outage: log a warning.
	First Step = iota
	// Reminder is a failure of an outage that lasts, the first one
	// Every after the last warning: log a warning again, with the
	// failures and for how long.
	Reminder
	// Again is any other failure: log it at Debug. It is also the step
	// of a failure that begins an outage less than Every after the last
	// warning (the outage came back), so that a flapping dependency warns
	// at most once per interval.
	Again
)

// Tracker follows the outages of one call (or one kind of failure). Its
// zero value is ready to use with DefaultEvery; it is safe for concurrent
// use.
type Tracker struct {
	// Every is the reminder interval; 0 is DefaultEvery.
	Every time.Duration

	mu       sync.Mutex
	failures int       // in a row, since the outage began
	since    time.Time // when it began
	warned   time.Time // the last warning; kept across outages
	logged   bool      // the outage was warned about: its end is logged
}

// Failure records a failure at now and returns how to log it, how many
// failures the outage counts with it, and when the outage began.
func (t *Tracker) Failure(now time.Time) (step Step, failures int, since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	every := t.Every
	if every <= 0 {
		every = DefaultEvery
	}
	t.failures++
	if t.failures == 1 {
		t.since = now
	}
	due := t.warned.IsZero() || now.Sub(t.warned) >= every || now.Before(t.warned)
	switch {
	case !due:
		step = Again
	case t.failures == 1 && !t.logged:
		step = First
	default:
		step = Reminder
	}
	if step != Again {
		t.warned, t.logged = now, true
	}
	return step, t.failures, t.since
}

// Success records a success at now. It ends the outage, if there was one,
// and returns how many calls failed in it and for how long (0 and 0 when
// none did), and whether the outage was warned about, so that its end is
// to be logged (at Info; else at Debug).
func (t *Tracker) Success(now time.Time) (failures int, after time.Duration, logged bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == 0 {
		return 0, 0, false
	}
	failures, after, logged = t.failures, now.Sub(t.since), t.logged
	t.failures, t.logged = 0, false
	return failures, after, logged
}

// Down reports whether the call is in an outage: it failed last.
func (t *Tracker) Down() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures > 0
}
