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

// LingerTarget returns how many writes a group-committing writer waits to
// see queued (with YieldUntil) after committing group, while queued more
// writes queued up: those plus the writes of group that insert reports,
// whose callers come straight back when each waits for its own commit; 0
// (no wait) for a group without inserts. Lingering pays for producers
// enqueueing one task at a time, not for fetches or outcome batches, which
// come back on their own schedule (and outcome batches are held, see
// Holder): counting them would make the writer wait out its bound after
// every group that carried them.
func LingerTarget[W any](group []W, queued int, insert func(W) bool) int {
	n := 0
	for _, w := range group {
		if insert(w) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return queued + n
}
