package api

import (
	"net/http"
	"testing"
)

// TestStatsListsAtMostLimitTypes: types are whatever clients enqueue, so
// GET /v1/stats lists at most ?limit= of them (default 100), those with
// the most tasks, in name order; type_count and overall cover them all.
func TestStatsListsAtMostLimitTypes(t *testing.T) {
	e := newEnv(t, envOpts{})
	for typ, n := range map[string]int{"a": 1, "b": 3, "c": 2} {
		for range n {
			e.enqueue(map[string]any{"type": typ})
		}
	}
	names := func(m map[string]any) []string {
		var out []string
		for _, x := range m["types"].([]any) {
			out = append(out, x.(map[string]any)["type"].(string))
		}
		return out
	}
	all := e.must(http.StatusOK, "GET", "/v1/stats", nil).m
	if got := names(all); len(got) != 3 || got[0] != "a" || all["type_count"] != 3.0 {
		t.Fatalf("stats: types %v, type_count %v", got, all["type_count"])
	}
	two := e.must(http.StatusOK, "GET", "/v1/stats?limit=2", nil).m
	if got := names(two); len(got) != 2 || got[0] != "b" || got[1] != "c" || two["type_count"] != 3.0 {
		t.Fatalf("stats?limit=2: types %v, type_count %v; want b and c, 3", got, two["type_count"])
	}
	if total := two["overall"].(map[string]any)["total"]; total != 6.0 {
		t.Fatalf("stats?limit=2: overall total %v, want all 6 tasks", total)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, "limit", "GET", "/v1/stats?"+q, nil)
	}
}
