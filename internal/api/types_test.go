package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

func TestTypes(t *testing.T) { backendtest.Run(t, testTypes) }

func testTypes(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	// An unconfigured type: the defaults, stored=false.
	d := e.must(http.StatusOK, "GET", "/v1/types/never.set", nil).m
	pol := d["retry"].(map[string]any)
	if d["stored"] != false || d["type"] != "never.set" || pol["max_attempts"] != 5.0 || pol["backoff"] != "exponential" ||
		d["target"] != nil || d["updated_at"] != nil || d["timeout_seconds"] != 300.0 {
		t.Fatalf("default type = %v", d)
	}
	if l := e.must(http.StatusOK, "GET", "/v1/types", nil).m; len(l["types"].([]any)) != 0 {
		t.Fatalf("types = %v", l)
	}

	p := e.must(http.StatusOK, "PUT", "/v1/types/billing/charge", map[string]any{
		"retry":           map[string]any{"backoff": "linear", "initial_delay_seconds": 0.5, "max_delay_seconds": 60, "max_attempts": 7, "no_retry_on": []string{"402"}},
		"timeout_seconds": 12.5,
		"priority":        3,
		"target":          map[string]any{"url": "https://example.com/hook", "headers": map[string]string{"X-K": "v"}, "timeout_seconds": 5},
	}).m
	pol = p["retry"].(map[string]any)
	tg := p["target"].(map[string]any)
	if p["type"] != "billing/charge" || p["stored"] != true || p["timeout_seconds"] != 12.5 || p["priority"] != 3.0 ||
		pol["backoff"] != "linear" || pol["initial_delay_seconds"] != 0.5 || pol["max_attempts"] != 7.0 || pol["jitter"] != "proportional" ||
		tg["url"] != "https://example.com/hook" || tg["timeout_seconds"] != 5.0 {
		t.Fatalf("put = %v", p)
	}
	mustTime(t, p["updated_at"])
	g := e.must(http.StatusOK, "GET", "/v1/types/billing/charge", nil).m
	if g["stored"] != true || g["priority"] != 3.0 || g["retry"].(map[string]any)["max_attempts"] != 7.0 {
		t.Fatalf("get = %v", g)
	}
	l := e.must(http.StatusOK, "GET", "/v1/types", nil).m["types"].([]any)
	if len(l) != 1 || l[0].(map[string]any)["type"] != "billing/charge" {
		t.Fatalf("list = %v", l)
	}
	// The type's priority and max attempts apply to new tasks.
	task := e.enqueue(map[string]any{"type": "billing/charge"})
	if task["priority"] != 3.0 || task["max_attempts"] != 7.0 {
		t.Fatalf("task = %v", task)
	}
	// PUT replaces: an empty body config resets to defaults.
	r := e.must(http.StatusOK, "PUT", "/v1/types/billing/charge", `{}`).m
	if r["priority"] != 0.0 || r["target"] != nil || r["retry"].(map[string]any)["max_attempts"] != 5.0 {
		t.Fatalf("reset = %v", r)
	}

	for _, c := range []struct{ body, field string }{
		{`{"retry":{"backoff":"random"}}`, "retry.backoff"},
		{`{"retry":{"initial_delay_seconds":10,"max_delay_seconds":5}}`, "retry.max_delay_seconds"},
		{`{"retry":{"max_attempts":-1}}`, "retry.max_attempts"},
		// A task's own max_attempts is at most 10000: so is its type's.
		{`{"retry":{"max_attempts":10001}}`, "retry.max_attempts"},
		{`{"retry":{"jitter_fraction":2}}`, "retry.jitter_fraction"},
		{`{"retry":{"bogus":1}}`, "retry.bogus"},
		{`{"retry":{"initial_delay_seconds":"1s"}}`, "retry.initial_delay_seconds"},
		{`{"retry":[]}`, "retry"},
		{`{"timeout_seconds":-1}`, "timeout_seconds"},
		{`{"timeout_seconds":90000}`, "timeout_seconds"},
		{`{"priority":"x"}`, "priority"},
		{`{"priority":1000001}`, "priority"},
		{`{"target":{"url":"ftp://x"}}`, "target.url"},
		{`{"target":{}}`, "target.url"},
		{`{"target":{"url":"http://x","method":"BREW"}}`, "target.method"},
		{`{"target":{"url":"http://x","nope":1}}`, "target.nope"},
		{`{"target":{"url":"http://x","timeout_seconds":-1}}`, "target.timeout_seconds"},
		{`{"target":{"url":"http://x","timeout_seconds":1e-10}}`, "target.timeout_seconds"},
		{`{"target":{"url":"http://x","concurrency":"many"}}`, "target.concurrency"},
		{`{"target":{"url":"http://x","headers":{"X-A":"v\r\nX-Injected: 1"}}}`, `target.headers["X-A"]`},
		{`{"target":{"url":"http://x","headers":{"Bad Name":"v"}}}`, `target.headers["Bad Name"]`},
		{`{"target":{"url":"http://x","headers":{"retryq-task-id":"spoofed"}}}`, `target.headers["retryq-task-id"]`},
		{`{"target":{"url":"http://x","headers":{"Idempotency-Key":"k"}}}`, `target.headers["Idempotency-Key"]`},
		{`{"target":{"url":"http://x","headers":{"Content-Length":"3"}}}`, `target.headers["Content-Length"]`},
		// Two spellings of one header (the strict decoder refuses them first).
		{`{"target":{"url":"http://x","headers":{"X-Key":"a","x-key":"b"}}}`, `target.headers.x-key`},
		// Hop-by-hop headers, which HTTP/2 refuses or drops.
		{`{"target":{"url":"http://x","headers":{"Upgrade":"h2c"}}}`, `target.headers["Upgrade"]`},
		{`{"target":{"url":"http://x","headers":{"te":"trailers"}}}`, `target.headers["te"]`},
		{`{"target":{"url":"http://x","headers":{"Keep-Alive":"timeout=5"}}}`, `target.headers["Keep-Alive"]`},
		// A Host that net/http would send cut at the slash.
		{`{"target":{"url":"http://x","headers":{"Host":"a.example/b"}}}`, `target.headers["Host"]`},
		{`{"type":"x"}`, "type"},
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "PUT", "/v1/types/t1", c.body)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "type", "PUT", "/v1/types/bad%20name", `{}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "type", "GET", "/v1/types/bad%20name", nil)
	e.mustErr(http.StatusBadRequest, CodeMalformedJSON, "", "PUT", "/v1/types/t1", nil)
	e.mustErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "DELETE", "/v1/types/t1", nil)
	if g := e.must(http.StatusOK, "GET", "/v1/types/t1", nil).m; g["stored"] != false {
		t.Fatalf("invalid PUTs stored t1: %v", g)
	}
}

// A read-only token sees how a push type is delivered but not the
// credentials it is delivered with: header values, the URL's password,
// query values and a key in its path are redacted in GET /v1/types and
// GET /v1/types/{type}. A full-access
// token, which may change the configuration, sees it whole.
func TestReadTokenSeesTargetSecretsRedacted(t *testing.T) {
	e := newEnv(t, envOpts{apiTokens: []string{"full-1"}, readTokens: []string{"read-1"}})
	e.must(http.StatusOK, "PUT", "/v1/types/hook", `{"target":{"url":"http://svc:s3cret@127.0.0.1:9/in/T01/p4th5ecretT0ken0123456789?api_key=q-456&sig=z","headers":{"X-Api-Key":"k-123","Authorization":"Bearer abc"}}}`)
	e.must(http.StatusOK, "PUT", "/v1/types/plain", `{"target":{"url":"http://127.0.0.1:9/in"}}`)

	target := func(m map[string]any) map[string]any {
		tg, _ := m["target"].(map[string]any)
		if tg == nil {
			t.Fatalf("no target in %v", m)
		}
		return tg
	}
	check := func(tg map[string]any, wantURL, wantKey, wantAuth string) {
		t.Helper()
		h, _ := tg["headers"].(map[string]any)
		if tg["url"] != wantURL || h["X-Api-Key"] != wantKey || h["Authorization"] != wantAuth {
			t.Fatalf("target = %v; want url %q, X-Api-Key %q, Authorization %q", tg, wantURL, wantKey, wantAuth)
		}
	}
	const redactedURL = "http://svc:REDACTED@127.0.0.1:9/in/T01/REDACTED?api_key=REDACTED&sig=REDACTED"

	r := e.must(http.StatusOK, "GET", "/v1/types/hook", nil, withToken("read-1"))
	check(target(r.m), redactedURL, "REDACTED", "REDACTED")
	if strings.Contains(string(r.raw), "s3cret") || strings.Contains(string(r.raw), "k-123") || strings.Contains(string(r.raw), "q-456") ||
		strings.Contains(string(r.raw), "5ecret") {
		t.Fatalf("read-only answer leaks a secret: %s", r.raw)
	}
	r = e.must(http.StatusOK, "GET", "/v1/types", nil, withToken("read-1"))
	if strings.Contains(string(r.raw), "s3cret") || strings.Contains(string(r.raw), "k-123") || strings.Contains(string(r.raw), "Bearer abc") ||
		strings.Contains(string(r.raw), "q-456") || strings.Contains(string(r.raw), "5ecret") {
		t.Fatalf("read-only listing leaks a secret: %s", r.raw)
	}
	for _, it := range r.m["types"].([]any) {
		m := it.(map[string]any)
		switch m["type"] {
		case "hook":
			check(target(m), redactedURL, "REDACTED", "REDACTED")
		case "plain":
			if got := target(m)["url"]; got != "http://127.0.0.1:9/in" {
				t.Fatalf("plain url = %v", got)
			}
		}
	}

	// The full-access token gets the configuration whole, so that it can be
	// read, edited and stored back.
	r = e.must(http.StatusOK, "GET", "/v1/types/hook", nil)
	check(target(r.m), "http://svc:s3cret@127.0.0.1:9/in/T01/p4th5ecretT0ken0123456789?api_key=q-456&sig=z", "k-123", "Bearer abc")
	// And the stored configuration itself is untouched by a read-only read.
	spec, err := e.eng.TypeSpec(context.Background(), "hook")
	if err != nil || spec.Target == nil || spec.Target.Headers["X-Api-Key"] != "k-123" {
		t.Fatalf("stored target = %+v, %v", spec.Target, err)
	}
}

// TestGetTypeShowsTheStoredConfiguration: GET /v1/types/{type} answers
// the stored configuration, as GET /v1/types and "retryq types get" say,
// also right after a change made through another node. Before, it
// answered this node's cached copy, up to several seconds old: the list
// showed the change while the type's own GET, on the same node, did not,
// and an operator who stored a configuration through one node and read it
// back through another saw the old one.
func TestGetTypeShowsTheStoredConfiguration(t *testing.T) {
	e := newEnv(t, envOpts{})
	if g := e.must(http.StatusOK, "GET", "/v1/types/ocr", nil).m; g["stored"] != false {
		t.Fatalf("before any change: %v", g)
	}
	// Another node stores it: this node's engine is not told.
	if _, err := e.st.PutType(context.Background(), store.TypeConfig{Type: "ocr", Priority: 7}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if l := e.must(http.StatusOK, "GET", "/v1/types", nil).m["types"].([]any); len(l) != 1 || l[0].(map[string]any)["priority"] != 7.0 {
		t.Fatalf("list after the change: %v", l)
	}
	if g := e.must(http.StatusOK, "GET", "/v1/types/ocr", nil).m; g["stored"] != true || g["priority"] != 7.0 {
		t.Fatalf("GET /v1/types/ocr after the change stored through another node: %v; want stored, priority 7", g)
	}
}
