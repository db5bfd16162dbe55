package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// kill leases one task of typ and fails it permanently with code.
func (e *env) kill(typ, code string) string {
	e.t.Helper()
	l := e.leaseOne(typ, nil)
	r := e.must(http.StatusOK, "POST", "/v1/tasks/"+l["id"].(string)+"/fail", map[string]any{
		"lease_id": l["lease_id"], "error": map[string]any{"code": code, "message": "boom " + code, "retryable": false},
	})
	if r.m["state"] != "dead" {
		e.t.Fatalf("fail = %s", r)
	}
	return l["id"].(string)
}

func TestDLQ(t *testing.T) { backendtest.Run(t, testDLQ) }

func testDLQ(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	start := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	for range 3 {
		e.enqueue(map[string]any{"type": "a"})
	}
	e.enqueue(map[string]any{"type": "b"})
	a1, a2 := e.kill("a", "E1"), e.kill("a", "E1")
	e.kill("a", "E2")
	b1 := e.kill("b", "E2")

	l := e.must(http.StatusOK, "GET", "/v1/dlq", nil).m
	if ts := l["tasks"].([]any); len(ts) != 4 || ts[0].(map[string]any)["dead_reason"] != "non_retryable" {
		t.Fatalf("dlq = %v", l)
	}
	if ts := e.must(http.StatusOK, "GET", "/v1/dlq?type=a&error_code=E1&reason=non_retryable&since="+url.QueryEscape(start), nil).m["tasks"].([]any); len(ts) != 2 {
		t.Fatalf("filtered dlq = %v", ts)
	}
	p1 := e.must(http.StatusOK, "GET", "/v1/dlq?limit=3", nil).m
	p2 := e.must(http.StatusOK, "GET", "/v1/dlq?limit=3&cursor="+p1["next_cursor"].(string), nil).m
	if len(p1["tasks"].([]any)) != 3 || len(p2["tasks"].([]any)) != 1 || p2["next_cursor"] != nil {
		t.Fatalf("pages = %v / %v", p1, p2)
	}
	if ts := e.must(http.StatusOK, "GET", "/v1/dlq?since=2999-01-01T00:00:00Z", nil).m["tasks"].([]any); len(ts) != 0 {
		t.Fatalf("future since = %v", ts)
	}
	for _, c := range []struct{ q, field string }{
		{"since=yesterday", "since"}, {"reason=tired", "reason"}, {"limit=-1", "limit"}, {"type=a%20b", "type"}, {"cursor=..%2F", "cursor"}, {"x=1", "x"},
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "GET", "/v1/dlq?"+c.q, nil)
	}

	s := e.must(http.StatusOK, "GET", "/v1/dlq/summary", nil).m
	gs := s["groups"].([]any)
	g0 := gs[0].(map[string]any)
	if s["total"] != 4.0 || len(gs) != 3 || g0["type"] != "a" || g0["error_code"] != "E1" || g0["count"] != 2.0 || g0["reason"] != "non_retryable" {
		t.Fatalf("summary = %v", s)
	}
	if mustTime(t, g0["oldest"]).After(mustTime(t, g0["newest"])) {
		t.Fatalf("oldest after newest: %v", g0)
	}
	if s := e.must(http.StatusOK, "GET", "/v1/dlq/summary?since=2999-01-01T00:00:00Z", nil).m; s["total"] != 0.0 || len(s["groups"].([]any)) != 0 {
		t.Fatalf("future summary = %v", s)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "since", "GET", "/v1/dlq/summary?since=1", nil)

	// Redrive by ids and by filter.
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/redrive", map[string]any{"ids": []string{a1}}).m; r["redriven"] != 1.0 {
		t.Fatalf("redrive ids = %v", r)
	}
	if st := e.state(a1); st != "pending" {
		t.Fatalf("redriven task state %s", st)
	}
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/redrive", map[string]any{"type": "b", "error_code": "E2", "limit": 10}).m; r["redriven"] != 1.0 {
		t.Fatalf("redrive filter = %v", r)
	}
	if e.state(b1) != "pending" {
		t.Fatal("b1 not redriven")
	}
	for _, c := range []struct{ body, field string }{
		{`{"reason":"x"}`, "reason"}, {`{"since":"x"}`, "since"}, {`{"limit":-1}`, "limit"}, {`{"ids":[""]}`, "ids[0]"},
		{`{"older_than_seconds":5}`, "older_than_seconds"}, {`{"type":"a b"}`, "type"},
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "POST", "/v1/dlq/redrive", c.body)
	}

	// Purge: older_than excludes fresh deaths; the filter selects.
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/purge", map[string]any{"older_than_seconds": 3600}).m; r["purged"] != 0.0 {
		t.Fatalf("purge older = %v", r)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "older_than_seconds", "POST", "/v1/dlq/purge", `{"older_than_seconds":-1}`)
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/purge", map[string]any{"type": "a", "error_code": "E1"}).m; r["purged"] != 1.0 {
		t.Fatalf("purge = %v", r)
	}
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "GET", "/v1/tasks/"+a2, nil)
	// An empty body matches every dead task.
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/purge", nil).m; r["purged"] != 1.0 {
		t.Fatalf("purge all = %v", r)
	}
	if s := e.must(http.StatusOK, "GET", "/v1/dlq/summary", nil).m; s["total"] != 0.0 {
		t.Fatalf("summary after purge = %v", s)
	}
}

// TestDLQEmptyIDsRefused: an "ids" list given empty is a 400 on ids, not
// "every dead task": a client whose id list came out empty must not redrive
// or purge the whole DLQ.
func TestDLQEmptyIDsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.enqueue(map[string]any{"type": "a"})
	e.kill("a", "E1")
	for _, path := range []string{"/v1/dlq/redrive", "/v1/dlq/purge"} {
		e.mustErr(http.StatusBadRequest, "invalid_field", "ids", "POST", path, map[string]any{"ids": []string{}})
	}
	l := e.must(http.StatusOK, "GET", "/v1/dlq", nil).m
	if ts := l["tasks"].([]any); len(ts) != 1 {
		t.Fatalf("dead tasks after refused calls: %d, want 1", len(ts))
	}
}

// TestDLQNoErrorCode: no_error_code selects the dead tasks whose last
// error has no code, the summary's group with an empty error_code, which no
// error_code filter can name (an empty one means no filter), in listing,
// redrive and purge; combined with error_code it is a 400.
func TestDLQNoErrorCode(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i := 0; i < 3; i++ {
		e.enqueue(map[string]any{"type": "a"})
	}
	coded := e.kill("a", "E1")
	plain1, plain2 := e.kill("a", ""), e.kill("a", "")

	l := e.must(http.StatusOK, "GET", "/v1/dlq?no_error_code=true", nil).m
	var got []string
	for _, tk := range l["tasks"].([]any) {
		got = append(got, tk.(map[string]any)["id"].(string))
	}
	if len(got) != 2 || got[0] == coded || got[1] == coded {
		t.Fatalf("no_error_code listing = %v, want %s and %s", got, plain1, plain2)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "no_error_code", "GET", "/v1/dlq?no_error_code=yes", nil)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "no_error_code", "GET", "/v1/dlq?no_error_code=true&error_code=E1", nil)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "no_error_code", "POST", "/v1/dlq/redrive", map[string]any{"no_error_code": true, "error_code": "E1"})

	r := e.must(http.StatusOK, "POST", "/v1/dlq/redrive", map[string]any{"no_error_code": true, "limit": 1}).m
	if r["redriven"] != 1.0 {
		t.Fatalf("redrive = %v, want 1", r)
	}
	r = e.must(http.StatusOK, "POST", "/v1/dlq/purge", map[string]any{"no_error_code": true}).m
	if r["purged"] != 1.0 {
		t.Fatalf("purge = %v, want 1", r)
	}
	if e.state(coded) != store.StateDead {
		t.Fatalf("the task with a code was touched: %s", e.state(coded))
	}
}

// TestDLQFilterBodyTextMustBeUnicode: the type, error_code and ids of a
// redrive or purge body are compared byte for byte, as the query
// parameters of GET /v1/dlq are: invalid UTF-8 or an unpaired surrogate
// escape is a 400 naming the field, not turned into U+FFFD (which selects
// other tasks, or none, and reports success).
func TestDLQFilterBodyTextMustBeUnicode(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, route := range []string{"/v1/dlq/redrive", "/v1/dlq/purge"} {
		for _, c := range []struct{ body, field string }{
			{"{\"type\":\"a\xff\"}", "type"},
			{"{\"error_code\":\"E\xff\"}", "error_code"},
			{`{"error_code":"E\udc00"}`, "error_code"},
			{"{\"ids\":[\"\xff\"]}", "ids"},
			{`{"ids":["\ud800"]}`, "ids"},
		} {
			r := e.do("POST", route, c.body)
			if r.status != http.StatusBadRequest || r.errCode() != CodeInvalidField || !strings.HasPrefix(r.errField(), c.field) {
				t.Errorf("%s %s: got %s, want 400 naming %s", route, c.body, r, c.field)
			}
		}
	}
}

// TestDLQBodyTypeErrorsNameTheWireField: a member of the wrong type in a
// purge body is named as sent ("limit"), as in a redrive body, not by the
// Go struct holding it ("dlqFilterBody.limit"); older_than_seconds stays
// purge's alone.
func TestDLQBodyTypeErrorsNameTheWireField(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, route := range []string{"/v1/dlq/redrive", "/v1/dlq/purge"} {
		for _, c := range []struct{ body, field string }{
			{`{"limit":"x"}`, "limit"}, {`{"reason":1}`, "reason"}, {`{"no_error_code":"yes"}`, "no_error_code"},
		} {
			e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "POST", route, c.body)
		}
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "older_than_seconds", "POST", "/v1/dlq/redrive", `{"older_than_seconds":5}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "older_than_seconds", "POST", "/v1/dlq/purge", `{"older_than_seconds":"x"}`)
}

// TestDLQQueryTextMustBeUnicode: a free-text filter in a query string must
// be Unicode text, as in a redrive or purge body: GET /v1/dlq with an
// error_code that is not UTF-8 (or holds NUL) is a 400 naming it, not a
// list that quietly matches nothing.
func TestDLQQueryTextMustBeUnicode(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, route := range []string{"/v1/dlq?error_code=E%FF", "/v1/dlq?error_code=E%00", "/v1/dlq/summary?error_code=%C3"} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, "error_code", "GET", route, "")
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "type", "GET", "/v1/dlq?type=a%FF", "")
	r := e.do("GET", "/v1/dlq?error_code=%C3%A9t%C3%A9", "")
	if r.status != http.StatusOK {
		t.Errorf("GET with a Unicode error_code: got %s, want 200", r)
	}
}

// TestDLQBodyOfNonJSONSpaceIsRefused: a body of characters that are white
// space to Unicode but not to JSON (a form feed, a vertical tab, a
// no-break space, an ideographic space) is malformed JSON, not the empty
// body that selects every dead task. Read as empty, it purged the whole
// dead-letter queue.
func TestDLQBodyOfNonJSONSpaceIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.enqueue(map[string]any{"type": "a"})
	id := e.kill("a", "E1")
	for _, body := range []string{"\f", "\v", "\u00a0", "\u0085", "\u3000", " \v\n"} {
		for _, path := range []string{"/v1/dlq/purge", "/v1/dlq/redrive"} {
			e.mustErr(http.StatusBadRequest, CodeMalformedJSON, "", "POST", path, body)
		}
		e.mustErr(http.StatusBadRequest, CodeMalformedJSON, "", "POST", "/v1/tasks/"+id+"/retry", body)
	}
	if st := e.state(id); st != store.StateDead {
		t.Fatalf("dead task is %s after refused bodies", st)
	}
	// JSON's own white space is still an empty body.
	if r := e.must(http.StatusOK, "POST", "/v1/dlq/redrive", " \t\r\n").m; r["redriven"] != 1.0 {
		t.Fatalf("redrive with a blank body = %v", r)
	}
}
