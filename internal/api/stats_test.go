package api

import (
	"net/http"
	"testing"
	"time"
)

func TestStatsAndNodes(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must(http.StatusOK, "PUT", "/v1/types/s", map[string]any{"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.01, "jitter": "none"}})
	e.enqueue(map[string]any{"type": "s"})
	e.enqueue(map[string]any{"type": "s"})
	e.enqueue(map[string]any{"type": "other", "delay_seconds": 60})
	// X fails and retries; Y (pending, so ahead of X's retry) dies; X's
	// second attempt succeeds: 3 attempts, 1 retry, 2 failures, 2 tasks.
	x := e.leaseOne("s", nil)
	e.must(http.StatusOK, "POST", "/v1/tasks/"+x["id"].(string)+"/fail", map[string]any{"lease_id": x["lease_id"], "error": map[string]any{"message": "x"}})
	y := e.leaseOne("s", nil)
	if y["id"] == x["id"] {
		t.Fatalf("retry leased before the pending task: %v", y)
	}
	e.must(http.StatusOK, "POST", "/v1/tasks/"+y["id"].(string)+"/fail", map[string]any{"lease_id": y["lease_id"], "error": map[string]any{"message": "x", "retryable": false}})
	x2 := e.leaseOne("s", nil)
	if x2["id"] != x["id"] || x2["attempt"] != 2.0 {
		t.Fatalf("second attempt = %v", x2)
	}
	e.must(http.StatusOK, "POST", "/v1/tasks/"+x2["id"].(string)+"/complete", map[string]any{"lease_id": x2["lease_id"]})
	s := e.must(http.StatusOK, "GET", "/v1/stats", nil).m
	o := s["overall"].(map[string]any)
	counts := o["counts"].(map[string]any)
	if s["window_seconds"] != 3600.0 || o["total"] != 3.0 || counts["scheduled"] != 1.0 || counts["succeeded"] != 1.0 ||
		len(counts) != 7 || o["attempts"] != 3.0 || o["retries"] != 1.0 || o["failures"] != 2.0 {
		t.Fatalf("stats = %v", s)
	}
	if rr := o["retry_rate"].(float64); rr < 0.33 || rr > 0.34 {
		t.Fatalf("retry_rate = %v", rr)
	}
	if m := o["mean_retries_per_task"].(float64); m != 0.5 {
		t.Fatalf("mean_retries_per_task = %v", m)
	}
	types := s["types"].([]any)
	if len(types) != 2 || types[1].(map[string]any)["type"] != "s" || types[1].(map[string]any)["dlq_size"] != 1.0 || o["dlq_size"] != 1.0 {
		t.Fatalf("types = %v", types)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "window", "GET", "/v1/stats?window=1", nil)

	var nodes []any
	waitFor(t, "the node to register", 10*time.Second, func() bool {
		nodes = e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any)
		return len(nodes) > 0
	})
	n := nodes[0].(map[string]any)
	if n["id"] != "test-node" || n["version"] != "test" || n["alive"] != true {
		t.Fatalf("node = %v", n)
	}
	mustTime(t, n["last_seen"])
	if ns := e.must(http.StatusOK, "GET", "/v1/nodes?since=2999-01-01T00:00:00Z", nil).m["nodes"].([]any); len(ns) != 0 {
		t.Fatalf("future nodes = %v", ns)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "since", "GET", "/v1/nodes?since=now", nil)
}
