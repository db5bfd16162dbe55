package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retryq/retryq/store"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, envOpts{apiTokens: []string{"full-1", "full-2"}, readTokens: []string{"read-1"}})
	e.token = ""

	// Missing or wrong token: 401 with WWW-Authenticate, on known and unknown routes.
	for _, c := range []struct {
		method, path string
		opts         []reqOpt
	}{
		{"GET", "/v1/tasks", nil},
		{"GET", "/v1/tasks", []reqOpt{withToken("nope")}},
		{"GET", "/v1/tasks", []reqOpt{func(r *http.Request) { r.Header.Set("Authorization", "Basic full-1") }}},
		{"GET", "/v1/tasks", []reqOpt{withToken("full-1x")}},
		{"GET", "/v1/tasks", []reqOpt{withToken("full")}},
		{"POST", "/v1/tasks", nil},
		{"GET", "/v1/stats", nil},
		{"GET", "/v1/nosuchroute", nil},
	} {
		r := e.mustErr(http.StatusUnauthorized, CodeUnauthorized, "", c.method, c.path, nil, c.opts...)
		if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s %s: WWW-Authenticate = %q", c.method, c.path, r.header.Get("WWW-Authenticate"))
		}
	}
	// Health, readiness and the OpenAPI document need no token.
	e.must(http.StatusOK, "GET", "/healthz", nil)
	e.must(http.StatusOK, "GET", "/readyz", nil)
	e.must(http.StatusOK, "GET", "/v1/openapi.json", nil)

	// Read-only token: reads pass, mutations get 403.
	e.must(http.StatusOK, "GET", "/v1/tasks", nil, withToken("read-1"))
	e.must(http.StatusOK, "GET", "/v1/stats", nil, withToken("read-1"))
	for _, p := range []struct{ method, path string }{
		{"POST", "/v1/tasks"}, {"POST", "/v1/tasks/batch"}, {"PUT", "/v1/types/a"}, {"POST", "/v1/dlq/purge"},
		{"POST", "/v1/leases"}, {"DELETE", "/v1/tasks/X"},
	} {
		e.mustErr(http.StatusForbidden, CodeForbidden, "", p.method, p.path, `{"type":"a"}`, withToken("read-1"))
	}
	// Full tokens (either of them, case-insensitive scheme) may do everything.
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`, withToken("full-2"))
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`, func(r *http.Request) { r.Header.Set("Authorization", "bearer full-1") })
	// With a valid token unknown routes are 404.
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "GET", "/v1/nosuchroute", nil, withToken("read-1"))
}

func TestAuthConfig(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []Config{
		{},
		{Engine: e.eng, APITokens: []string{""}},
		{Engine: e.eng, ReadTokens: []string{"  "}},
		{Engine: e.eng, APITokens: []string{"x"}, ReadTokens: []string{"x"}},
		{Engine: e.eng, MaxBodyBytes: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	if h, err := New(Config{Engine: e.eng}); err != nil || h == nil {
		t.Fatalf("New: %v", err)
	}
	a, _ := NewAuth(nil, nil)
	if a.Enabled() {
		t.Fatal("no tokens: enabled")
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		tokens bool
		ok     bool
	}{
		{"127.0.0.1:7420", false, true},
		{"localhost:7420", false, true},
		{"[::1]:7420", false, true},
		{"127.0.0.2:7420", false, true},
		{"0.0.0.0:7420", false, false},
		{":7420", false, false},
		{"[::]:7420", false, false},
		{"10.0.0.5:7420", false, false},
		{"example.com:7420", false, false},
		{"0.0.0.0:7420", true, true},
		{":7420", true, true},
		{"nonsense", false, false},
	} {
		err := CheckListen(c.addr, c.tokens)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %v) = %v", c.addr, c.tokens, err)
		}
	}
	err := CheckListen("0.0.0.0:7420", false)
	if !strings.HasPrefix(err.Error(), "refusing to listen on 0.0.0.0:7420 without --api-token: ") {
		t.Fatalf("message = %q", err)
	}
}

func TestHealthAndReady(t *testing.T) {
	e := newEnv(t, envOpts{})
	if r := e.must(http.StatusOK, "GET", "/healthz", nil); r.m["status"] != "ok" {
		t.Fatalf("healthz = %s", r)
	}
	e.must(http.StatusOK, "GET", "/readyz", nil) // default check: real store, migrated

	var fail error
	e2 := newEnv(t, envOpts{ready: func(context.Context) error { return fail }})
	e2.must(http.StatusOK, "GET", "/readyz", nil)
	fail = errors.New("db gone")
	r := e2.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
	if strings.Contains(r.errMsg(), "db gone") {
		t.Fatalf("internal detail leaked: %s", r)
	}
	e2.must(http.StatusOK, "GET", "/healthz", nil)
	e.mustErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "POST", "/healthz", nil)
}

func TestHTTPErrors(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1024})

	// 404 and 405 are JSON too.
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "GET", "/v1/nope", nil)
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "GET", "/", nil)
	r := e.mustErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "DELETE", "/v1/tasks", nil)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
	r = e.mustErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "GET", "/v1/dlq/purge", nil)
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow = %q", r.header.Get("Allow"))
	}

	// Unclean paths are redirected by the mux, then served.
	if r := e.must(http.StatusOK, "GET", "/v1//tasks", nil); r.m["tasks"] == nil {
		t.Fatalf("redirected list = %s", r)
	}

	// 415: a body that is not application/json.
	e.mustErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "", "POST", "/v1/tasks", `{"type":"a"}`, withContentType("text/plain"))
	e.mustErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "", "POST", "/v1/tasks", `{"type":"a"}`, withContentType(""))
	e.mustErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "", "PUT", "/v1/types/a", `{}`, withContentType("application/x-www-form-urlencoded"))
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`, withContentType("application/json; charset=utf-8"))
	// An empty body on an action route needs no content type.
	id := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/cancel", nil, withContentType(""))

	// 413: over MaxBodyBytes, with and without a Content-Length.
	big := `{"type":"a","payload":"` + strings.Repeat("x", 2000) + `"}`
	e.mustErr(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "", "POST", "/v1/tasks", big)
	e.mustErr(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "", "POST", "/v1/tasks", io.MultiReader(strings.NewReader(big)))
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a","payload":"`+strings.Repeat("x", 900)+`"}`)

	// Request ids: echoed when safe, generated otherwise.
	r = e.do("GET", "/healthz", nil, func(r *http.Request) { r.Header.Set("X-Request-Id", "abc-123") })
	if r.header.Get("X-Request-Id") != "abc-123" {
		t.Fatalf("X-Request-Id = %q", r.header.Get("X-Request-Id"))
	}
	r = e.do("GET", "/healthz", nil, func(r *http.Request) { r.Header.Set("X-Request-Id", "bad id;<script>") })
	if got := r.header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
		t.Fatalf("X-Request-Id = %q", got)
	}
}

// TestUncleanPathOfAChangeIsNotRedirected: a request other than GET and
// HEAD to a path the mux would redirect (one not in its clean form, one
// without a trailing slash) is answered with a JSON 404, not a 307. A 307
// asks the client to send the same change to the other path, and clients
// that follow it (Go's, Python's) did: a cancel of /v1/tasks/X/../Y/cancel
// cancelled Y, and a PUT of the type "a/../b" (a name the API refuses)
// configured b. Reads are still redirected.
func TestUncleanPathOfAChangeIsNotRedirected(t *testing.T) {
	e := newEnv(t, envOpts{})
	x := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	y := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	// e.hc follows redirects, sending the body again as a 307 asks.
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "/v1/tasks/"+x+"/../"+y+"/cancel", nil)
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "/v1/tasks/./"+y+"/cancel", `{}`)
	if st := e.state(y); st != store.StatePending {
		t.Fatalf("task %s is %s after a refused cancel", y, st)
	}
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "PUT", "/v1/types/a/../b", map[string]any{"priority": 7})
	if r := e.must(http.StatusOK, "GET", "/v1/types/b", nil).m; r["stored"] != false {
		t.Fatalf("type b after a refused PUT of a/../b: %v", r)
	}
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "//v1/tasks", map[string]any{"type": "c"})
	// The mux's other redirect, to the path with a trailing slash.
	if r := e.mustErr(http.StatusNotFound, CodeNotFound, "", "PUT", "/v1/types", map[string]any{}); r.header.Get("Location") != "" {
		t.Fatalf("refused redirect still names a Location: %q", r.header.Get("Location"))
	}
	if ts := e.must(http.StatusOK, "GET", "/v1/tasks?type=c", nil).m["tasks"].([]any); len(ts) != 0 {
		t.Fatalf("tasks enqueued through //v1/tasks: %v", ts)
	}
	// A read is redirected to its clean path and served.
	if r := e.must(http.StatusOK, "GET", "/v1/tasks/"+x+"/../"+y, nil); r.m["id"] != y {
		t.Fatalf("redirected read = %s", r)
	}
}

func TestInternalErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	// A panicking handler becomes a 500 carrying the request id.
	e.srv.mux.Handle("GET /v1/panic", e.srv.wrap(func(w http.ResponseWriter, r *http.Request) error { panic("boom") }, false))
	r := e.mustErr(http.StatusInternalServerError, CodeInternal, "", "GET", "/v1/panic", nil)
	if id := str2(r.m, "error", "request_id"); id == "" || id != r.header.Get("X-Request-Id") {
		t.Fatalf("request_id %q, header %q", id, r.header.Get("X-Request-Id"))
	}
	// A closed database is a 503 with the request id, never a 4xx.
	e.st.Close()
	r = e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "GET", "/v1/tasks", nil)
	if str2(r.m, "error", "request_id") == "" {
		t.Fatalf("no request id: %s", r)
	}
	e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
}

// TestNewAuthRefusesUnusableTokens: a token no request could present is a
// configuration error naming it: empty, with surrounding white space (the
// header's value is read trimmed, so it would never match), or holding a
// control character other than a tab, which no header value may hold (such
// tokens used to be accepted, and every client got 401).
func TestNewAuthRefusesUnusableTokens(t *testing.T) {
	for _, c := range []struct {
		api, read []string
		want      string
	}{
		{[]string{""}, nil, "APITokens[0]: must not be empty"},
		{[]string{"ok", " tok"}, nil, "APITokens[1]: must not start or end with white space"},
		{nil, []string{"tok\n"}, "ReadTokens[0]: must not start or end with white space"},
		{[]string{"same"}, []string{"same"}, "ReadTokens[0]: is also a full-access API token"},
		{[]string{"line\nbreak"}, nil, "APITokens[0]: must not hold control characters: no request could send it"},
		{nil, []string{"ok", "bell\x07"}, "ReadTokens[1]: must not hold control characters: no request could send it"},
		{[]string{"del\x7fete"}, nil, "APITokens[0]: must not hold control characters: no request could send it"},
	} {
		_, err := NewAuth(c.api, c.read)
		if err == nil || err.Error() != c.want {
			t.Errorf("NewAuth(%q, %q) = %v, want %q", c.api, c.read, err, c.want)
		}
	}
	if _, err := NewAuth([]string{"a-token", "inner\ttab"}, []string{"r-token"}); err != nil {
		t.Fatal(err)
	}
}

// TestErrorAnswersEchoInputBounded: an error answer quotes at most a short
// stretch of what it refuses. A refused path, query parameter name or
// member name was quoted whole, twice for a name (field and message) and
// six times over for each '&' or '<' (escaped as \u0026, \u003c): a 200 KB
// path got an unauthenticated client a 1.2 MB answer.
func TestErrorAnswersEchoInputBounded(t *testing.T) {
	e := newEnv(t, envOpts{apiTokens: []string{"tok"}})
	amps := strings.Repeat("&", 200<<10)
	lts := strings.Repeat("%3C", 100<<10)
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"GET", "/" + amps, nil, http.StatusNotFound}, // no token needed
		{"DELETE", "/v1/tasks/" + amps + "/cancel", nil, http.StatusMethodNotAllowed},
		{"GET", "/v1/tasks?" + lts + "=1", nil, http.StatusBadRequest},
		{"POST", "/v1/tasks", `{"` + amps + `":1}`, http.StatusBadRequest},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"` + amps + `":1}]}`, http.StatusBadRequest},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status != c.status || r.errMsg() == "" {
			t.Fatalf("%s %.40s: got %.300s, want %d", c.method, c.path, r, c.status)
		}
		if len(r.raw) > 2048 {
			t.Fatalf("%s %.40s: a %d-byte answer: %.300s", c.method, c.path, len(r.raw), r.raw)
		}
	}
}

// TestMoreThanOneAuthorizationHeaderIsRefused: a request with two
// Authorization headers is ambiguous (HTTP allows only one) and gets 401.
// The first used to be taken and the others ignored, so the access granted
// depended on the headers' order: a read-only and a full-access token gave
// full access when the full one came first, and a wrong token before a
// valid one was refused while the reverse was let in.
func TestMoreThanOneAuthorizationHeaderIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{apiTokens: []string{"full-1"}, readTokens: []string{"read-1"}})
	e.token = ""
	headers := func(vs ...string) reqOpt {
		return func(r *http.Request) {
			for _, v := range vs {
				r.Header.Add("Authorization", v)
			}
		}
	}
	for _, vs := range [][]string{
		{"Bearer full-1", "Bearer read-1"},
		{"Bearer read-1", "Bearer full-1"},
		{"Bearer full-1", "Bearer nope"},
		{"Bearer full-1", "Bearer full-1"},
		{"Bearer full-1", ""},
	} {
		for _, method := range []string{"GET", "POST"} {
			r := e.mustErr(http.StatusUnauthorized, CodeUnauthorized, "", method, "/v1/tasks", `{"type":"a"}`, headers(vs...))
			if !strings.Contains(r.errMsg(), "more than one") {
				t.Fatalf("%s with %q: message %q does not say why", method, vs, r.errMsg())
			}
		}
	}
	// One header still works, and public routes ignore the headers.
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`, headers("Bearer full-1"))
	e.must(http.StatusOK, "GET", "/healthz", nil, headers("Bearer full-1", "Bearer read-1"))
}
