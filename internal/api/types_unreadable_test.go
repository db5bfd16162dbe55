package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestTypesListShowsAnUnreadableTypeWithoutFailing: a stored configuration
// this binary cannot decode (a newer version's policy field, during a
// rolling upgrade) is listed with the reason it cannot be read, and the
// other types are still listed; GET /v1/types/{type} answers it the same
// way. Before, one such row made GET /v1/types fail whole with a 500.
func TestTypesListShowsAnUnreadableTypeWithoutFailing(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must(http.StatusOK, "PUT", "/v1/types/good", map[string]any{"retry": map[string]any{"max_attempts": 4}})
	if _, err := e.st.PutType(context.Background(), store.TypeConfig{
		Type: "newer", Policy: []byte(`{"max_attempts":1,"field_from_a_newer_version":1}`),
	}, time.Now()); err != nil {
		t.Fatal(err)
	}
	l := e.must(http.StatusOK, "GET", "/v1/types", nil).m
	types := l["types"].([]any)
	if len(types) != 2 {
		t.Fatalf("types = %v, want good and newer", types)
	}
	byName := map[string]map[string]any{}
	for _, x := range types {
		m := x.(map[string]any)
		byName[m["type"].(string)] = m
	}
	if g := byName["good"]; g == nil || g["unreadable"] != nil || g["retry"].(map[string]any)["max_attempts"] != 4.0 {
		t.Fatalf("good = %v", g)
	}
	check := func(what string, n map[string]any) {
		t.Helper()
		reason, _ := n["unreadable"].(string)
		if !strings.Contains(reason, "field_from_a_newer_version") || n["retry"] != nil || n["stored"] != true {
			t.Fatalf("%s: newer = %v, want stored, retry null and the reason it is unreadable", what, n)
		}
	}
	check("list", byName["newer"])
	check("get", e.must(http.StatusOK, "GET", "/v1/types/newer", nil).m)
}
