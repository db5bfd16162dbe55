package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLeaseOverLongPollCapIs503: with the node's cap of waiting lease
// requests reached, one more that asks to wait and finds nothing due is
// answered at once with 503 overloaded and Retry-After, not left waiting;
// one that finds a task due gets it.
func TestLeaseOverLongPollCapIs503(t *testing.T) {
	e := newEnv(t, envOpts{maxLongPolls: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/leases",
			strings.NewReader(`{"worker_id":"w1","types":["cap.idle"],"wait_seconds":30}`))
		req.Header.Set("Content-Type", "application/json")
		if res, err := e.hc.Do(req); err == nil { // an error once cancelled below
			res.Body.Close()
		}
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for e.eng.LongPolls() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first long poll never started waiting")
		}
		time.Sleep(time.Millisecond)
	}
	r := e.mustErr(http.StatusServiceUnavailable, CodeOverloaded, "", "POST", "/v1/leases",
		map[string]any{"worker_id": "w2", "types": []string{"cap.idle"}, "wait_seconds": 30})
	if got := r.header.Get("Retry-After"); got == "" {
		t.Fatalf("503 overloaded without Retry-After: %v", r.header)
	}
	id := e.enqueue(map[string]any{"type": "cap.busy", "payload": 1})["id"]
	r = e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w2", "types": []string{"cap.busy"}, "wait_seconds": 30})
	if tasks, _ := r.m["tasks"].([]any); len(tasks) != 1 || tasks[0].(map[string]any)["id"] != id {
		t.Fatalf("lease over the cap with a task due: %s", r.raw)
	}
}
