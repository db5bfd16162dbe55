package api

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store/postgres"
)

// TestPostgresStoppedAnswers503: with PostgreSQL stopped (fast shutdown, on
// a cluster of the test's own), every route that needs the database answers
// 503 unavailable with Retry-After at once, /readyz 503 not_ready, /healthz
// 200; the log has one warning for the API and one for /readyz, not a line
// per request. Once the server is back, an enqueue the client retries with
// its idempotency key creates the task once.
func TestPostgresStoppedAnswers503(t *testing.T) {
	c := pgtest.NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: c.NewDatabase(t), AutoMigrate: true, MaxConns: 6, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := newEnv(t, envOpts{store: st, log: slog.New(slog.NewTextHandler(&logs, nil))})
	e.hc.Timeout = 20 * time.Second
	id := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	lease := e.leaseOne("a", nil)["lease_id"].(string)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	key := map[string]any{"type": "k", "idempotency_key": "once"}
	reqs := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/tasks", key},
		{"POST", "/v1/tasks/batch", map[string]any{"tasks": []any{map[string]any{"type": "a"}}}},
		{"POST", "/v1/leases", map[string]any{"worker_id": "w", "types": []string{"a"}, "wait_seconds": 5}},
		{"POST", "/v1/leases/" + lease + "/heartbeat", nil},
		{"POST", "/v1/tasks/" + id + "/complete", map[string]any{"lease_id": lease}},
		{"POST", "/v1/tasks/" + id + "/fail", map[string]any{"lease_id": lease, "error": map[string]any{"message": "x"}}},
		{"GET", "/v1/tasks", nil},
		{"GET", "/v1/tasks/" + id, nil},
		{"POST", "/v1/tasks/" + id + "/cancel", nil},
		{"GET", "/v1/types/a", nil},
		{"PUT", "/v1/types/a", map[string]any{"priority": 3}},
		{"GET", "/v1/dlq", nil},
		{"POST", "/v1/dlq/redrive", map[string]any{}},
		{"GET", "/v1/stats", nil},
	}
	for range 2 {
		for _, r := range reqs {
			start := time.Now()
			res := e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", r.method, r.path, r.body)
			if res.header.Get("Retry-After") == "" {
				t.Errorf("%s %s: 503 without Retry-After", r.method, r.path)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s %s: answered after %s", r.method, r.path, d)
			}
		}
		e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
		e.must(http.StatusOK, "GET", "/healthz", nil)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the keyed enqueue to succeed", 30*time.Second, func() bool {
		return e.do("POST", "/v1/tasks", key).status/100 == 2
	})
	again := e.do("POST", "/v1/tasks", key)
	if again.status/100 != 2 {
		t.Fatalf("keyed enqueue sent again: %s", again)
	}
	list := e.must(http.StatusOK, "GET", "/v1/tasks?type=k", nil)
	if ts, _ := list.m["tasks"].([]any); len(ts) != 1 {
		t.Fatalf("%d tasks for one idempotency key: %s", len(ts), list.raw)
	}
	e.must(http.StatusOK, "GET", "/readyz", nil)

	checkOutageWarnedOnce(t, logs.String())
}
