package store

import (
	"runtime"
	"time"
)

// YieldUntil yields the processor until done reports true, for at most max
// (and at most 10,000 yields). Group-committing backends use it to let the
// callers their last commit answered come back before starting the next
// group: the wait is tens of microseconds, far below the resolution of Go
// timers here (about 1 ms), so it yields instead of sleeping. done is called
// first, so a condition already true costs nothing.
func YieldUntil(done func() bool, max time.Duration) {
	if done() {
		return
	}
	deadline := time.Now().Add(max)
	for i := 0; i < 10_000 && !done() && time.Now().Before(deadline); i++ {
		runtime.Gosched()
	}
}
