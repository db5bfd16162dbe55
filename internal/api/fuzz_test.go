package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fuzzBody feeds raw bytes as the JSON body of method path through the
// real handler (over a real store and engine). No input may produce a 5xx
// or a panic, and every response must be JSON.
// setup may prepare data and rewrite the path (and seeds).
func fuzzBody(f *testing.F, method, path string, setup func(e *env, path string, seeds []string) (string, []string), seeds ...string) {
	e := newEnv(f, envOpts{sync: "OFF"}) // durability is irrelevant here; speed is not
	if setup != nil {
		path, seeds = setup(e, path, seeds)
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Bounded: a long-poll lease must not stall the fuzzer.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body.Bytes())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %s %q: Content-Type %q", method, path, body, ct)
		}
	})
}

func FuzzEnqueueBody(f *testing.F) {
	fuzzBody(f, "POST", "/v1/tasks", nil,
		`{"type":"a","payload":{"x":[1,2,{"y":null}]},"priority":3,"max_attempts":2,"idempotency_key":"k"}`,
		`{"type":"a","delay_seconds":1.5}`,
		`{"type":"a","run_at":"2030-01-01T00:00:00.5+02:00"}`,
		`{"type":"a","run_at":"2030-01-01T00:00:00Z","delay_seconds":0}`,
		`{"type":"a","priority":1e400}`,
		`{"type":"\u0000"}`,
		`[]`, `null`, `{"type":"a"} x`, ``)
}

func FuzzBatchBody(f *testing.F) {
	fuzzBody(f, "POST", "/v1/tasks/batch", nil,
		`{"tasks":[{"type":"a"},{"type":"b","payload":1,"idempotency_key":"k"},{"type":"b","idempotency_key":"k"}]}`,
		`{"tasks":[{"type":"a","delay_seconds":-1}]}`,
		`{"tasks":[]}`, `{"tasks":[null]}`, `{"tasks":null}`)
}

func FuzzTypeBody(f *testing.F) {
	fuzzBody(f, "PUT", "/v1/types/fuzz", nil,
		`{"retry":{"backoff":"exponential","initial_delay_seconds":0.5,"multiplier":3,"max_delay_seconds":60,"max_doublings":2,"jitter":"full","jitter_fraction":0.5,"max_attempts":4,"retry_window_seconds":600,"retry_on":["503"],"no_retry_on":["400"]},"timeout_seconds":30,"priority":-2}`,
		`{"target":{"url":"https://example.com/x","method":"PUT","headers":{"A":"b"},"timeout_seconds":2,"concurrency":4}}`,
		`{"retry":{"initial_delay_seconds":1e30}}`,
		`{"retry":{"multiplier":-1}}`,
		`{"retry":null,"target":null}`, `{}`)
}

func FuzzLeaseBody(f *testing.F) {
	fuzzBody(f, "POST", "/v1/leases", func(e *env, path string, seeds []string) (string, []string) {
		for range 20 {
			e.enqueue(map[string]any{"type": "a"})
		}
		return path, seeds
	},
		`{"worker_id":"w","types":["a"],"max":2,"wait_seconds":0,"lease_seconds":1.5}`,
		`{"worker_id":"w","types":["a","b"],"wait_seconds":30}`,
		`{"worker_id":"w","types":[],"max":0}`,
		`{"worker_id":"","types":["a"],"lease_seconds":1e10}`)
}

func FuzzFailBody(f *testing.F) {
	fuzzBody(f, "POST", "/v1/tasks/ID/fail", func(e *env, path string, seeds []string) (string, []string) {
		id := e.enqueue(map[string]any{"type": "a"})["id"].(string)
		lease := e.leaseOne("a", map[string]any{"lease_seconds": 3600})["lease_id"].(string)
		for i := range seeds {
			seeds[i] = strings.ReplaceAll(seeds[i], "LEASE", lease)
		}
		return strings.Replace(path, "ID", id, 1), seeds
	},
		`{"lease_id":"LEASE","error":{"code":"503","message":"m","retryable":true,"retry_after_seconds":2}}`,
		`{"lease_id":"LEASE","error":{"code":"400","message":"m"}}`,
		`{"lease_id":"LEASE","error":null}`,
		`{"lease_id":"x.y","error":{"message":"m"}}`)
}

// TestHandlerNeverPanicsOnRoutes is a quick sweep of odd requests over
// every route (method × path × body) that must never produce a 5xx.
func TestHandlerNeverPanicsOnRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	bodies := []string{"", "{}", "null", "[]", `{"x":1}`, `{"type":"a"}`, "{", `"s"`, "0"}
	for _, rt := range e.srv.routes {
		path := rt.pattern
		for _, p := range []struct{ from, to string }{{"{id}", "ID1"}, {"{type...}", "t"}, {"{lease_id}", "a.b"}} {
			path = strings.ReplaceAll(path, p.from, p.to)
		}
		for _, b := range bodies {
			for _, m := range []string{rt.method, "PATCH"} {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				req := httptest.NewRequestWithContext(ctx, m, path, bytes.NewReader([]byte(b)))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				e.srv.ServeHTTP(rec, req)
				cancel()
				if rec.Code >= 500 {
					t.Errorf("%s %s %q: %d %s", m, path, b, rec.Code, rec.Body.Bytes())
				}
				if m == "PATCH" && rec.Code != http.StatusMethodNotAllowed {
					t.Errorf("PATCH %s: %d", path, rec.Code)
				}
			}
		}
	}
}
