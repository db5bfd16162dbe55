package api

import (
	"net/http"
	"testing"
)

// TestDLQSummaryFilterAndLimit: GET /v1/dlq/summary takes the filter of
// GET /v1/dlq and a limit on the groups it returns; total and group_count
// count every matching group, those past the limit included, so a client
// can tell what a redrive with that filter would take from one call, and a
// DLQ with many distinct error codes does not make one huge answer.
func TestDLQSummaryFilterAndLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	for range 6 {
		e.enqueue(map[string]any{"type": "a"})
	}
	for range 2 {
		e.enqueue(map[string]any{"type": "b"})
	}
	for _, c := range []string{"E1", "E1", "E1", "E2", "E2", "E3"} {
		e.kill("a", c)
	}
	e.kill("b", "E1")
	e.kill("b", "")
	sum := func(q string) (groups []any, total, count float64, first map[string]any) {
		t.Helper()
		s := e.must(http.StatusOK, "GET", "/v1/dlq/summary"+q, nil).m
		groups = s["groups"].([]any)
		if len(groups) > 0 {
			first = groups[0].(map[string]any)
		}
		return groups, s["total"].(float64), s["group_count"].(float64), first
	}
	if gs, total, count, first := sum(""); len(gs) != 5 || total != 8 || count != 5 || first["error_code"] != "E1" || first["count"] != 3.0 {
		t.Fatalf("summary: %d groups, total %v, group_count %v, first %v", len(gs), total, count, first)
	}
	if gs, total, count, first := sum("?limit=2"); len(gs) != 2 || total != 8 || count != 5 || first["error_code"] != "E1" {
		t.Fatalf("limit 2: %d groups, total %v, group_count %v, first %v", len(gs), total, count, first)
	}
	if gs, total, count, _ := sum("?type=a&limit=1"); len(gs) != 1 || total != 6 || count != 3 {
		t.Fatalf("type a, limit 1: %d groups, total %v, group_count %v", len(gs), total, count)
	}
	if gs, total, count, first := sum("?error_code=E1"); len(gs) != 2 || total != 4 || count != 2 || first["type"] != "a" {
		t.Fatalf("error_code E1: %d groups, total %v, group_count %v, first %v", len(gs), total, count, first)
	}
	if gs, total, _, first := sum("?no_error_code=true"); len(gs) != 1 || total != 1 || first["type"] != "b" {
		t.Fatalf("no_error_code: %d groups, total %v, first %v", len(gs), total, first)
	}
	if gs, total, _, _ := sum("?reason=max_attempts"); len(gs) != 0 || total != 0 {
		t.Fatalf("reason max_attempts: %d groups, total %v", len(gs), total)
	}
	for _, c := range []struct{ q, field string }{
		{"limit=0", "limit"}, {"limit=1001", "limit"}, {"reason=tired", "reason"},
		{"error_code=E1&no_error_code=true", "no_error_code"}, {"cursor=x", "cursor"},
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "GET", "/v1/dlq/summary?"+c.q, nil)
	}
}
