package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// readRoutes are the GET routes whose path segment and query string
// FuzzReadRequest varies: a prefix, then the fuzzed segment.
var readRoutes = []string{
	"/v1/tasks", "/v1/dlq", "/v1/dlq/summary", "/v1/stats", "/v1/nodes", "/v1/types",
	"/v1/tasks/", "/v1/types/", "/v1/tasks/batch",
}

// FuzzReadRequest sends GET requests with arbitrary query strings and
// path segments through the real handler, over a store holding live and
// dead tasks. No input may produce a 5xx or a panic; every answer that is
// not a redirect (the mux cleans paths like "a/../b") is a JSON object.
func FuzzReadRequest(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	var ids []string
	for range 3 {
		ids = append(ids, e.enqueue(map[string]any{"type": "a"})["id"].(string))
	}
	e.enqueue(map[string]any{"type": "b"})
	dead := e.kill("a", "E1")
	e.kill("b", "E2")
	seeds := []struct {
		route      byte
		seg, query string
	}{
		{0, "", "type=a&state=pending,dead&limit=2"},
		{0, "", "limit=0"},
		{0, "", "limit=1001&cursor=x"},
		{0, "", "state=running&state=dead"},
		{0, "", "cursor=" + ids[1]},
		{0, "", "%zz"},
		{0, "", "type=%00"},
		{1, "", "type=a&code=E1&reason=non_retryable&since=2020-01-01T00:00:00Z&limit=1"},
		{1, "", "since=yesterday"},
		{1, "", "reason=max_attempts&cursor=" + dead},
		{2, "", "since=2030-01-01T00:00:00+02:00"},
		{3, "", "x=1"},
		{4, "", ""},
		{5, "", "limit=1"},
		{6, ids[0], ""},
		{6, dead, "x"},
		{6, "../dlq", ""},
		{6, "not-an-id", ""},
		{7, "a", ""},
		{7, "a/b c", ""},
		{7, "\xff", ""},
		{8, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.route, s.seg, s.query)
	}
	f.Fuzz(func(t *testing.T, route byte, seg, rawQuery string) {
		// Bounded: a stuck read must not stall the fuzzer.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.URL.Path = readRoutes[int(route)%len(readRoutes)] + seg
		req.URL.RawPath = ""
		req.URL.RawQuery = rawQuery
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code == http.StatusServiceUnavailable && ctx.Err() != nil {
			return // the fuzzer's own deadline, on a loaded machine
		}
		if rec.Code >= 500 {
			t.Fatalf("GET %q ? %q: %d %s", req.URL.Path, rawQuery, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 300 && rec.Code < 400 {
			return
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("GET %q ? %q: %d with Content-Type %q", req.URL.Path, rawQuery, rec.Code, ct)
		}
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("GET %q ? %q: %d, body is not a JSON object: %v\n%s", req.URL.Path, rawQuery, rec.Code, err, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			if _, ok := body["error"]; !ok {
				t.Fatalf("GET %q ? %q: %d without an error member: %s", req.URL.Path, rawQuery, rec.Code, rec.Body.Bytes())
			}
		}
		checkRefusal(t, fmt.Sprintf("GET %q ? %q", req.URL.Path, rawQuery), rec)
		if rec.Code == 200 && (req.URL.Path == "/v1/tasks" || req.URL.Path == "/v1/dlq") {
			checkListFilter(t, req.URL.Path, rawQuery, rec.Body.Bytes())
		}
	})
}

// checkListFilter fails t unless every task of a page answered for
// GET /v1/tasks or /v1/dlq matches the query's filters.
func checkListFilter(t *testing.T, path, rawQuery string, body []byte) {
	t.Helper()
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("GET %s ? %q answered 200, but the query is malformed: %v", path, rawQuery, err)
	}
	var page struct {
		Tasks []struct {
			ID         string           `json:"id"`
			Type       string           `json:"type"`
			State      string           `json:"state"`
			DeadReason string           `json:"dead_reason"`
			UpdatedAt  time.Time        `json:"updated_at"`
			LastError  *store.ErrorInfo `json:"last_error"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("GET %s ? %q: %v", path, rawQuery, err)
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil {
		limit = 100
	}
	if len(page.Tasks) > limit {
		t.Fatalf("GET %s ? %q: %d tasks", path, rawQuery, len(page.Tasks))
	}
	var states []string
	if s := q.Get("state"); s != "" {
		for _, part := range strings.Split(s, ",") {
			states = append(states, strings.TrimSpace(part))
		}
	}
	since, _ := time.Parse(time.RFC3339Nano, q.Get("since"))
	for _, task := range page.Tasks {
		code, hasCode := "", task.LastError != nil && task.LastError.Code != ""
		if hasCode {
			code = task.LastError.Code
		}
		dead := path == "/v1/dlq"
		if q.Has("type") && q.Get("type") != "" && task.Type != q.Get("type") ||
			states != nil && !slices.Contains(states, task.State) ||
			dead && (task.State != string(store.StateDead) ||
				q.Get("reason") != "" && task.DeadReason != q.Get("reason") ||
				q.Get("error_code") != "" && code != q.Get("error_code") ||
				q.Get("no_error_code") == "true" && hasCode ||
				task.UpdatedAt.Before(since.Truncate(time.Microsecond))) {
			t.Fatalf("GET %s ? %q: task %s (%s, %s, %s, %q, %v) does not match", path, rawQuery, task.ID, task.Type, task.State, task.DeadReason, code, task.UpdatedAt)
		}
	}
}
