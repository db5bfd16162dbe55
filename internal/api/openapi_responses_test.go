package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// openAPISpec is the parsed OpenAPI document with a small JSON Schema
// checker for the subset the document uses ($ref, type, properties,
// required, additionalProperties, items, enum, anyOf, minimum, maximum,
// format date-time).
type openAPISpec struct {
	paths   map[string]map[string]any // path -> method -> operation
	schemas map[string]any
	resps   map[string]any
	// succeeded records the operations checkAnswer saw answer 2xx.
	succeeded map[string]bool
}

func loadOpenAPISpec(t *testing.T) *openAPISpec {
	t.Helper()
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas   map[string]any `json:"schemas"`
			Responses map[string]any `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPIJSON(), &doc); err != nil {
		t.Fatalf("decode OpenAPI document: %v", err)
	}
	return &openAPISpec{paths: doc.Paths, schemas: doc.Components.Schemas, resps: doc.Components.Responses,
		succeeded: make(map[string]bool)}
}

// responseSchema returns the schema the document declares for an answer
// of the operation with that status, or an error when it declares none.
func (sp *openAPISpec) responseSchema(method, path string, status int) (any, error) {
	op, ok := sp.paths[path][strings.ToLower(method)].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no operation %s %s", method, path)
	}
	rs, _ := op["responses"].(map[string]any)
	r, ok := rs[fmt.Sprint(status)].(map[string]any)
	if !ok {
		var declared []string
		for k := range rs {
			declared = append(declared, k)
		}
		sort.Strings(declared)
		return nil, fmt.Errorf("status %d is not declared (declared: %s)", status, strings.Join(declared, ", "))
	}
	if ref, ok := r["$ref"].(string); ok {
		r, ok = sp.resps[strings.TrimPrefix(ref, "#/components/responses/")].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("dangling %s", ref)
		}
	}
	content, _ := r["content"].(map[string]any)
	mt, _ := content["application/json"].(map[string]any)
	return mt["schema"], nil
}

// requestSchema returns the request body schema of the operation.
func (sp *openAPISpec) requestSchema(method, path string) any {
	op, _ := sp.paths[path][strings.ToLower(method)].(map[string]any)
	rb, _ := op["requestBody"].(map[string]any)
	content, _ := rb["content"].(map[string]any)
	mt, _ := content["application/json"].(map[string]any)
	return mt["schema"]
}

// validate reports every way v departs from schema, as "where: what".
func (sp *openAPISpec) validate(schema, v any, where string) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return nil // no schema: anything
	}
	if ref, ok := s["$ref"].(string); ok {
		target, ok := sp.schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
		if !ok {
			return []string{where + ": dangling " + ref}
		}
		return sp.validate(target, v, where)
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var all []string
		for _, alt := range alts {
			errs := sp.validate(alt, v, where)
			if len(errs) == 0 {
				return nil
			}
			all = append(all, errs...)
		}
		return []string{where + ": matches no alternative: " + strings.Join(all, "; ")}
	}
	var errs []string
	if typ, ok := s["type"].(string); ok {
		if !hasJSONType(v, typ) {
			return []string{fmt.Sprintf("%s: want %s, got %s", where, typ, jsonValueString(v))}
		}
	}
	if vals, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range vals {
			if e == v {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("%s: %s is not one of %v", where, jsonValueString(v), vals))
		}
	}
	if f, ok := v.(float64); ok {
		if lo, ok := s["minimum"].(float64); ok && f < lo {
			errs = append(errs, fmt.Sprintf("%s: %g is below the minimum %g", where, f, lo))
		}
		if hi, ok := s["maximum"].(float64); ok && f > hi {
			errs = append(errs, fmt.Sprintf("%s: %g is above the maximum %g", where, f, hi))
		}
	}
	if str, ok := v.(string); ok && s["format"] == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not an RFC 3339 time", where, str))
		}
	}
	if items, ok := s["items"]; ok {
		if a, ok := v.([]any); ok {
			for i, e := range a {
				errs = append(errs, sp.validate(items, e, fmt.Sprintf("%s[%d]", where, i))...)
			}
		}
	}
	if m, ok := v.(map[string]any); ok {
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required member %q is missing", where, r))
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k]; ok {
				errs = append(errs, sp.validate(p, m[k], where+"."+k)...)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					errs = append(errs, fmt.Sprintf("%s: member %q is not in the schema", where, k))
				}
			case map[string]any:
				errs = append(errs, sp.validate(ap, m[k], where+"."+k)...)
			}
		}
	}
	return errs
}

func hasJSONType(v any, typ string) bool {
	switch typ {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	}
	return false
}

func jsonValueString(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// checkAnswer fails the test when the document does not declare the
// answer's status for the operation or its body does not match the
// declared schema.
func (sp *openAPISpec) checkAnswer(t *testing.T, method, path string, r *resp) {
	t.Helper()
	schema, err := sp.responseSchema(method, path, r.status)
	if err != nil {
		t.Errorf("%s %s answered %d: %v", method, path, r.status, err)
		return
	}
	var body any
	if err := json.Unmarshal(r.raw, &body); err != nil {
		t.Errorf("%s %s answered %d with a body that is not JSON: %s", method, path, r.status, r.raw)
		return
	}
	for _, e := range sp.validate(schema, body, "body") {
		t.Errorf("%s %s answered %d: %s", method, path, r.status, e)
	}
	if r.status < 300 {
		sp.succeeded[method+" "+path] = true
	}
}

// TestOpenAPIDescribesTheAnswers sends a request to every route, for each
// success and the errors a client can provoke, and checks every answer
// against docs/openapi.json: the status is declared for the operation and
// the body matches the declared schema (members, types, required ones,
// enums, times). TestOpenAPIRoutes checks only that the paths agree.
func TestOpenAPIDescribesTheAnswers(t *testing.T) {
	sp := loadOpenAPISpec(t)
	e := newEnv(t, envOpts{maxBody: 64 << 10})
	call := func(method, path, tmpl string, body any, opts ...reqOpt) *resp {
		t.Helper()
		if body != nil {
			if _, isStr := body.(string); !isStr {
				raw, _ := json.Marshal(body)
				var v any
				_ = json.Unmarshal(raw, &v)
				for _, err := range sp.validate(sp.requestSchema(method, tmpl), v, "request") {
					t.Errorf("%s %s: the test's own request departs from the document: %s", method, tmpl, err)
				}
			}
		}
		r := e.do(method, path, body, opts...)
		sp.checkAnswer(t, method, tmpl, r)
		return r
	}

	call("GET", "/healthz", "/healthz", nil)
	call("GET", "/readyz", "/readyz", nil)

	// Types: stored with a target, stored without, never configured.
	call("PUT", "/v1/types/push.t", "/v1/types/{type}", map[string]any{
		"retry":           map[string]any{"backoff": "exponential", "initial_delay_seconds": 2, "max_attempts": 3, "retry_window_seconds": 3600, "no_retry_on": []string{"400"}},
		"timeout_seconds": 10, "priority": 2,
		"target": map[string]any{"url": "http://127.0.0.1:1/hook", "headers": map[string]string{"X-Key": "k"}, "timeout_seconds": 1, "concurrency": 1},
	})
	call("PUT", "/v1/types/pull.t", "/v1/types/{type}", map[string]any{"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.5, "max_attempts": 2}})
	call("PUT", "/v1/types/pull.t", "/v1/types/{type}", map[string]any{"retry": map[string]any{"max_attempts": -1}})
	call("GET", "/v1/types", "/v1/types", nil)
	call("GET", "/v1/types/pull.t", "/v1/types/{type}", nil)
	call("GET", "/v1/types/never.configured", "/v1/types/{type}", nil)

	// Enqueue: created, duplicate, invalid, wrong media type, too large.
	call("POST", "/v1/tasks", "/v1/tasks", map[string]any{"type": "sched.t", "payload": map[string]any{"a": 1}, "idempotency_key": "k1", "delay_seconds": 3600})
	call("POST", "/v1/tasks", "/v1/tasks", map[string]any{"type": "sched.t", "idempotency_key": "k1"})
	call("POST", "/v1/tasks", "/v1/tasks", map[string]any{"type": "sched.t", "max_attempts": -1})
	call("POST", "/v1/tasks", "/v1/tasks", `{"type":"a"}`, withContentType("text/plain"))
	call("POST", "/v1/tasks", "/v1/tasks", `{"type":"a","payload":"`+strings.Repeat("x", 70<<10)+`"}`)
	call("POST", "/v1/tasks/batch", "/v1/tasks/batch", map[string]any{"tasks": []any{
		map[string]any{"type": "pull.t", "payload": 1}, map[string]any{"type": "pull.t", "payload": 2, "priority": 5},
	}})
	call("POST", "/v1/tasks/batch", "/v1/tasks/batch", map[string]any{"tasks": []any{}})
	list := call("GET", "/v1/tasks?limit=1", "/v1/tasks", nil)
	if c, ok := list.m["next_cursor"].(string); ok {
		call("GET", "/v1/tasks?limit=1&cursor="+c, "/v1/tasks", nil)
	}
	call("GET", "/v1/tasks?state=nope", "/v1/tasks", nil)
	// A method no route takes has no operation: its 405 is checked as
	// the one a declared operation of the path lists.
	sp.checkAnswer(t, "GET", "/v1/tasks", e.do("DELETE", "/v1/tasks", nil))

	// Pull: lease, heartbeat, fail (retry, then dead), complete, lost lease.
	lt := e.leaseOne("pull.t", map[string]any{"max": 1})
	id, lease := lt["id"].(string), lt["lease_id"].(string)
	call("POST", "/v1/leases", "/v1/leases", map[string]any{"worker_id": "w2", "types": []string{"pull.t"}, "max": 1})
	call("POST", "/v1/leases", "/v1/leases", map[string]any{"worker_id": "w2", "types": []string{"push.t"}})
	call("POST", "/v1/leases/"+lease+"/heartbeat", "/v1/leases/{lease_id}/heartbeat", map[string]any{"lease_seconds": 60})
	call("POST", "/v1/leases/"+lease+"/heartbeat", "/v1/leases/{lease_id}/heartbeat", nil)
	fr := call("POST", "/v1/tasks/"+id+"/fail", "/v1/tasks/{id}/fail", map[string]any{"lease_id": lease,
		"error": map[string]any{"code": "503", "message": "down", "retry_after_seconds": 0}})
	if fr.m["state"] != "retry_waiting" {
		t.Fatalf("fail: %s", fr.raw)
	}
	call("POST", "/v1/tasks/"+id+"/complete", "/v1/tasks/{id}/complete", map[string]any{"lease_id": lease})
	call("POST", "/v1/leases/"+lease+"/heartbeat", "/v1/leases/{lease_id}/heartbeat", nil)
	lt = e.leaseOne("pull.t", nil)
	call("POST", "/v1/tasks/"+lt["id"].(string)+"/fail", "/v1/tasks/{id}/fail", map[string]any{"lease_id": lt["lease_id"],
		"error": map[string]any{"code": "bad_input", "message": "no", "retryable": false}})
	e.enqueue(map[string]any{"type": "pull.t"})
	lt = e.leaseOne("pull.t", nil)
	call("POST", "/v1/tasks/"+lt["id"].(string)+"/complete", "/v1/tasks/{id}/complete", map[string]any{"lease_id": lt["lease_id"]})
	call("POST", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV/complete", "/v1/tasks/{id}/complete", map[string]any{"lease_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV.x"})
	call("GET", "/v1/tasks/"+id, "/v1/tasks/{id}", nil)
	call("GET", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", "/v1/tasks/{id}", nil)

	// Cancel and retry.
	sched := call("POST", "/v1/tasks", "/v1/tasks", map[string]any{"type": "sched.t", "delay_seconds": 3600}).m["id"].(string)
	call("POST", "/v1/tasks/"+sched+"/cancel", "/v1/tasks/{id}/cancel", nil)
	call("POST", "/v1/tasks/"+sched+"/cancel", "/v1/tasks/{id}/cancel", nil)
	call("POST", "/v1/tasks/"+sched+"/retry", "/v1/tasks/{id}/retry", map[string]any{})
	call("POST", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV/retry", "/v1/tasks/{id}/retry", nil)

	// The dead-letter queue (the task failed with retryable false is dead).
	call("GET", "/v1/dlq?reason=non_retryable", "/v1/dlq", nil)
	call("GET", "/v1/dlq/summary", "/v1/dlq/summary", nil)
	call("GET", "/v1/dlq?since=yesterday", "/v1/dlq", nil)
	call("POST", "/v1/dlq/redrive", "/v1/dlq/redrive", map[string]any{"type": "none.such", "limit": 10})
	call("POST", "/v1/dlq/purge", "/v1/dlq/purge", map[string]any{"reason": "non_retryable", "older_than_seconds": 0})
	call("POST", "/v1/dlq/purge", "/v1/dlq/purge", map[string]any{"ids": []string{}})

	call("GET", "/v1/stats", "/v1/stats", nil)
	call("GET", "/v1/nodes", "/v1/nodes", nil)
	call("GET", "/v1/nodes?since=2000-01-01T00:00:00Z", "/v1/nodes", nil)

	// A body that does not arrive in time: 408 on a route that takes one.
	t.Run("request_timeout", func(t *testing.T) {
		e := newEnv(t, envOpts{bodyTimeout: 100 * time.Millisecond})
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\":\"a"
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		defer res.Body.Close()
		var r resp
		r.status = res.StatusCode
		dec := json.NewDecoder(res.Body)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("408 body: %v", err)
		}
		r.raw = raw
		if r.status != http.StatusRequestTimeout {
			t.Fatalf("stalled body: status %d, want 408", r.status)
		}
		sp.checkAnswer(t, "POST", "/v1/tasks", &r)
	})

	// Tokens: missing (401) and read-only on a mutating route (403).
	t.Run("auth", func(t *testing.T) {
		e := newEnv(t, envOpts{apiTokens: []string{"full"}, readTokens: []string{"read"}})
		e.token = ""
		sp.checkAnswer(t, "GET", "/v1/stats", e.do("GET", "/v1/stats", nil))
		sp.checkAnswer(t, "POST", "/v1/tasks", e.do("POST", "/v1/tasks", map[string]any{"type": "a"}, withToken("read")))
		sp.checkAnswer(t, "GET", "/v1/openapi.json", e.do("GET", "/v1/openapi.json", nil))
	})

	// The 503s a client meets: a full disk on an enqueue (storage_full),
	// a database away on a read (unavailable), /readyz (not_ready).
	t.Run("unavailable", func(t *testing.T) {
		var fs *fullStore
		e := newEnv(t, envOpts{wrap: func(st store.Store) store.Store {
			fs = &fullStore{Store: &readDownStore{Store: st}}
			return fs
		}})
		fs.full.Store(true)
		fs.Store.(*readDownStore).down.Store(true)
		for _, c := range []struct{ method, path, tmpl, code string }{
			{"POST", "/v1/tasks", "/v1/tasks", CodeStorageFull},
			{"GET", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", "/v1/tasks/{id}", CodeUnavailable},
			{"GET", "/readyz", "/readyz", CodeNotReady},
		} {
			var body any
			if c.method == "POST" {
				body = map[string]any{"type": "a"}
			}
			r := e.do(c.method, c.path, body)
			if r.status != http.StatusServiceUnavailable || r.errCode() != c.code {
				t.Fatalf("%s %s: %d %s, want 503 %s", c.method, c.path, r.status, r.raw, c.code)
			}
			sp.checkAnswer(t, c.method, c.tmpl, r)
		}
	})

	// Every operation was seen succeeding: a new route needs a call here.
	for path, ops := range sp.paths {
		for method := range ops {
			if op := strings.ToUpper(method) + " " + path; !sp.succeeded[op] {
				t.Errorf("%s: no successful answer was checked", op)
			}
		}
	}
}
