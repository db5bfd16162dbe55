package api

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestStoppingNodeTakesReportsAndLeasesNothing: once the node began to shut
// down (Engine.BeginShutdown) while a pull worker holds a lease, /readyz
// answers 503 not_ready, a lease request (that passes its checks) is
// answered 503 unavailable with Retry-After, so that a worker waits instead
// of asking again at once, and logged as no fault; a bad one is still
// a 400. The lease's heartbeat and report are taken. /readyz answered 200
// and a lease request {"tasks": []} at once, which a worker long-polling
// through the stop asked again for at once.
func TestStoppingNodeTakesReportsAndLeasesNothing(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, envOpts{log: slog.New(slog.NewTextHandler(&logs, nil))})
	id := e.enqueue(map[string]any{"type": "stop.t"})["id"].(string)
	lease := e.leaseOne("stop.t", map[string]any{"lease_seconds": 60})["lease_id"].(string)
	e.enqueue(map[string]any{"type": "stop.t"})
	e.must(http.StatusOK, "GET", "/readyz", nil)

	e.eng.BeginShutdown()
	e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
	e.must(http.StatusOK, "GET", "/healthz", nil)
	r := e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "POST", "/v1/leases",
		map[string]any{"worker_id": "w2", "types": []string{"stop.t"}, "wait_seconds": 5})
	if r.header.Get("Retry-After") == "" || !strings.Contains(r.errMsg(), "shutting down") {
		t.Errorf("lease while stopping: %s, Retry-After %q; want one saying the node shuts down", r, r.header.Get("Retry-After"))
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "worker_id", "POST", "/v1/leases", map[string]any{"types": []string{"stop.t"}})
	e.must(http.StatusOK, "POST", "/v1/leases/"+lease+"/heartbeat", map[string]any{"lease_seconds": 60})
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": lease})
	if s := e.state(id); s != "succeeded" {
		t.Errorf("task reported while the node stops: %s, want succeeded", s)
	}
	if n := e.eng.PullLeasesOut(); n != 0 {
		t.Errorf("PullLeasesOut after the report = %d", n)
	}
	if out := logs.String(); strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Errorf("the stop's answers were logged as faults:\n%s", out)
	}
}
