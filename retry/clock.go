package retry

import "time"

// Clock is the source of time for [Do]. Tests substitute a fake (see
// package retrytest) to run retry loops without real waits.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that delivers on C() once d has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that [Do] uses.
type Timer interface {
	// C returns the channel on which the timer delivers the time.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it.
	Stop() bool
}

// SystemClock is the real clock: time.Now and time.NewTimer.
var SystemClock Clock = systemClock{}

type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

// C returns the timer's channel.
func (t sysTimer) C() <-chan time.Time { return t.t.C }

// Stop stops the timer.
func (t sysTimer) Stop() bool { return t.t.Stop() }
