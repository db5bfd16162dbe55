package cli

import (
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
)

// TestWorkerLongPollEndsBeforeItsRequestTimesOut: the worker's long poll
// is one the server accepts, and the server answers it (after the wait,
// plus time to lease and send) before the worker's own request timeout.
// A worker that gave up on its poll first would close the connection just
// as the server might lease to it, on every idle poll (docs/api.md).
func TestWorkerLongPollEndsBeforeItsRequestTimesOut(t *testing.T) {
	wait := time.Duration(pullWaitSeconds) * time.Second
	if wait <= 0 || wait > engine.MaxLeaseWait {
		t.Fatalf("the worker's long poll waits %v; the server takes 0..%v", wait, engine.MaxLeaseWait)
	}
	if margin := requestTimeout - wait; margin < 10*time.Second {
		t.Fatalf("the worker's request timeout %v leaves %v past its %v long poll; want at least 10s", requestTimeout, margin, wait)
	}
}
