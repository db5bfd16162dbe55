package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/engine"
)

// nested is a JSON array nested depth deep, holding an object that holds
// a string with brackets and escaped quotes and backslashes, which are
// not nesting.
func nested(depth int) string {
	return strings.Repeat("[", depth-1) + `{"s":"[\\\"[{\\\\"}` + strings.Repeat("]", depth-1)
}

// TestDeepPayloadIsRefused: a payload nested deeper than
// engine.MaxPayloadDepth is a 400 naming payload, alone or in a batch;
// one at that depth is taken, and every answer holding it (list, get,
// lease, DLQ) is read by Go's decoder. A payload nested 9990 deep used to
// be taken, and every list page and lease answer holding it then nested
// over 10000 deep, past what Go's decoder reads (Python's stops near
// 1000): a task no worker could lease without failing on the whole
// answer, which held the other tasks leased with it too.
func TestDeepPayloadIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1 << 20})
	for _, depth := range []int{engine.MaxPayloadDepth + 1, 9990} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, "payload", "POST", "/v1/tasks",
			`{"type":"deep.a","payload":`+nested(depth)+`}`)
		e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[1].payload", "POST", "/v1/tasks/batch",
			`{"tasks":[{"type":"deep.a"},{"type":"deep.a","payload":`+nested(depth)+`}]}`)
	}
	// The Go API (an in-process client on the same database) too.
	if _, err := e.eng.Enqueue(context.Background(), engine.EnqueueRequest{Type: "deep.a",
		Payload: json.RawMessage(nested(engine.MaxPayloadDepth + 1))}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("engine Enqueue of a payload nested too deep = %v, want ErrInvalid", err)
	}
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"deep.a","payload":`+nested(engine.MaxPayloadDepth)+`}`)
	decodes := func(method, path, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d, decoding the answer: %v", method, path, res.StatusCode, err)
		}
		return v
	}
	decodes("GET", "/v1/tasks?type=deep.a", "")
	ts, _ := decodes("POST", "/v1/leases", `{"worker_id":"w","types":["deep.a"],"wait_seconds":5}`)["tasks"].([]any)
	if len(ts) != 1 {
		t.Fatalf("leased %d tasks, want 1", len(ts))
	}
	task := ts[0].(map[string]any)
	decodes("GET", "/v1/tasks/"+task["id"].(string), "")
	e.must(http.StatusOK, "POST", "/v1/tasks/"+task["id"].(string)+"/fail",
		map[string]any{"lease_id": task["lease_id"], "error": map[string]any{"code": "x", "message": "m", "retryable": false}})
	decodes("GET", "/v1/dlq?type=deep.a", "")
}
