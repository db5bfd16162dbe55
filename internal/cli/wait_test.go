package cli

import (
	"testing"
	"time"
)

// waitLimit bounds every wait of the CLI's tests for a process, a line of
// output or a condition.
const waitLimit = 20 * time.Second

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
