package api

import (
	"net/http"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
)

// TestFailAnswerMatchesTheStoredState: a failure retried after a delay that
// has passed by the time it is stored (1 µs here) is stored pending (due), and the fail answer says so, with its run
// time and a zero delay, instead of a retry_waiting the task never had.
func TestFailAnswerMatchesTheStoredState(t *testing.T) {
	backendtest.Run(t, testFailAnswerMatchesTheStoredState)
}

func testFailAnswerMatchesTheStoredState(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	e.must(http.StatusOK, "PUT", "/v1/types/now", map[string]any{
		"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.000001, "jitter": "none", "max_attempts": 3},
	})
	id := e.enqueue(map[string]any{"type": "now"})["id"].(string)
	l := e.leaseOne("now", nil)
	f := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{
		"lease_id": l["lease_id"], "error": map[string]any{"code": "503", "message": "try again"},
	}).m
	if f["state"] != "pending" || f["delay_seconds"] != 0.000001 || f["dead_reason"] != nil {
		t.Fatalf("fail answer = %v, want pending with a 1 µs delay", f)
	}
	mustTime(t, f["next_run_at"])
	if got := e.state(id); got != "pending" {
		t.Fatalf("stored state %q, answer said %v", got, f["state"])
	}
}
