package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
)

// fidelityPayloads are payloads whose bytes must come back as sent
// (they are compact already): numbers past float64, -0 and 1.0, escapes
// and raw characters, NUL, astral and line separators, key order and a
// repeated key, and bare values.
var fidelityPayloads = []string{
	`9007199254740993`,
	`1e400`,
	`-0`,
	`1.0`,
	`[1.0,1,-0,1E+2,0.1e-400,-1.5e-10,123456789012345678901234567890]`,
	`"\u0000a\u0000"`,
	"\"\u2028\u2029\"",
	`"\u2028\u2029"`,
	"\"😀 é\"",
	`"\ud83d\ude00 \u00e9 \ud800"`,
	`{"b":1,"a":2,"a":3}`,
	`{"k":"<&>","\u0041":"\/"}`,
	`null`,
	`""`,
	`"bare"`,
	`true`,
	`{}`,
	`[]`,
	strings.Repeat("[", engine.MaxPayloadDepth) + strings.Repeat("]", engine.MaxPayloadDepth),
}

// rawDo sends a request and returns the status and raw answer, for
// answers that encoding/json cannot decode into a map (1e400).
func (e *env) rawDo(method, path, body string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

func (e *env) rawMust(status int, method, path, body string) []byte {
	e.t.Helper()
	got, raw := e.rawDo(method, path, body)
	if got != status {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, got, raw, status)
	}
	return raw
}

// idOf returns the id member of an answer.
func idOf(t *testing.T, raw []byte) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.ID == "" {
		t.Fatalf("no id in %s: %v", raw, err)
	}
	return v.ID
}

// payloadOf returns the raw payload member of a task object in raw.
func payloadOf(t *testing.T, raw []byte) string {
	t.Helper()
	var v struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return string(v.Payload)
}

// TestPayloadIsTheSameOnEveryPath: a payload comes back byte for byte as
// stored (compacted) in the enqueue's answer, GET, a lease, the DLQ list,
// after a redrive and after a manual retry, and is a push delivery's body
// (Content-Type application/json), on both backends: numbers float64
// cannot hold, -0 and 1.0, escaped NUL, raw and escaped U+2028, astral
// characters, a lone surrogate escape, member order and repeated members,
// bare values and the deepest nesting taken. A payload enqueued through
// the engine's own entry (the Go API's) with white space was stored as
// given: push targets got `{ "a" : 1 }` while answers showed {"a":1}.
func TestPayloadIsTheSameOnEveryPath(t *testing.T) {
	backendtest.Run(t, testPayloadIsTheSameOnEveryPath)
}

func testPayloadIsTheSameOnEveryPath(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	for _, p := range fidelityPayloads {
		raw := e.rawMust(http.StatusCreated, "POST", "/v1/tasks", `{"type":"f","payload":`+p+`}`)
		if got := payloadOf(t, raw); got != p {
			t.Errorf("POST answer: %q, want %q", got, p)
		}
		id := idOf(t, raw)
		if got := payloadOf(t, e.rawMust(http.StatusOK, "GET", "/v1/tasks/"+id, "")); got != p {
			t.Errorf("GET: %q, want %q", got, p)
		}
		var page struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		list := e.rawMust(http.StatusOK, "GET", "/v1/tasks?type=f&state=pending", "")
		if err := json.Unmarshal(list, &page); err != nil || len(page.Tasks) != 1 || payloadOf(t, page.Tasks[0]) != p {
			t.Errorf("list: %s, want payload %q", list, p)
		}
		lr := e.rawMust(http.StatusOK, "POST", "/v1/leases", `{"worker_id":"w","types":["f"],"wait_seconds":5}`)
		var la struct {
			Tasks []struct {
				Payload json.RawMessage `json:"payload"`
				LeaseID string          `json:"lease_id"`
			} `json:"tasks"`
		}
		if err := json.Unmarshal(lr, &la); err != nil || len(la.Tasks) != 1 {
			t.Fatalf("lease: %v %s", err, lr)
		}
		if got := string(la.Tasks[0].Payload); got != p {
			t.Errorf("lease: %q, want %q", got, p)
		}
		e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": la.Tasks[0].LeaseID,
			"error": map[string]any{"code": "x", "message": "m", "retryable": false}})
		dl := e.rawMust(http.StatusOK, "GET", "/v1/dlq", "")
		page.Tasks = nil
		if err := json.Unmarshal(dl, &page); err != nil || len(page.Tasks) != 1 || payloadOf(t, page.Tasks[0]) != p {
			t.Errorf("dlq: %s, want payload %q", dl, p)
		}
		e.must(http.StatusOK, "POST", "/v1/dlq/redrive", map[string]any{"ids": []string{id}})
		if got := payloadOf(t, e.rawMust(http.StatusOK, "GET", "/v1/tasks/"+id, "")); got != p {
			t.Errorf("GET after redrive: %q, want %q", got, p)
		}
		e.rawMust(http.StatusOK, "POST", "/v1/tasks/"+id+"/cancel", "")
		e.rawMust(http.StatusOK, "POST", "/v1/tasks/"+id+"/retry", "")
		if got := payloadOf(t, e.rawMust(http.StatusOK, "GET", "/v1/tasks/"+id, "")); got != p {
			t.Errorf("GET after retry: %q, want %q", got, p)
		}
		e.rawMust(http.StatusOK, "POST", "/v1/tasks/"+id+"/cancel", "")
	}

	batch := `{"tasks":[{"type":"b","payload":` + strings.Join(fidelityPayloads, `},{"type":"b","payload":`) + `}]}`
	var answer struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(e.rawMust(http.StatusCreated, "POST", "/v1/tasks/batch", batch), &answer); err != nil || len(answer.Tasks) != len(fidelityPayloads) {
		t.Fatalf("batch: %v, %d tasks", err, len(answer.Tasks))
	}
	for i, p := range fidelityPayloads {
		if got := payloadOf(t, answer.Tasks[i]); got != p {
			t.Errorf("batch answer: %q, want %q", got, p)
		}
		if got := payloadOf(t, e.rawMust(http.StatusOK, "GET", "/v1/tasks/"+idOf(t, answer.Tasks[i]), "")); got != p {
			t.Errorf("GET of a batch's task: %q, want %q", got, p)
		}
	}

	// Push, and the engine's own entry (the Go API's).
	var mu sync.Mutex
	bodies := map[string]string{}
	cts := map[string]string{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies[r.Header.Get("Retryq-Task-Id")] = string(b)
		cts[r.Header.Get("Retryq-Task-Id")] = r.Header.Get("Content-Type")
		mu.Unlock()
	}))
	defer target.Close()
	e.must(http.StatusOK, "PUT", "/v1/types/push", map[string]any{"target": map[string]any{"url": target.URL}})
	want := map[string]string{}
	for _, p := range append(fidelityPayloads, `{ "a" : 1 }`, " null ") {
		raw := e.rawMust(http.StatusCreated, "POST", "/v1/tasks", `{"type":"push","payload":`+p+`}`)
		var c bytes.Buffer
		_ = json.Compact(&c, []byte(p))
		want[idOf(t, raw)] = c.String()
	}
	for _, p := range []string{`{ "a" : 1 }`, " null ", "\t[1,\n2]\n"} {
		res, err := e.eng.Enqueue(t.Context(), engine.EnqueueRequest{Type: "push", Payload: json.RawMessage(p)})
		if err != nil {
			t.Fatal(err)
		}
		var c bytes.Buffer
		_ = json.Compact(&c, []byte(p))
		if got := payloadOf(t, e.rawMust(http.StatusOK, "GET", "/v1/tasks/"+res.Task.ID, "")); got != c.String() || string(res.Task.Payload) != got {
			t.Errorf("engine enqueue of %q: stored %q, answered %q, want %q", p, res.Task.Payload, got, c.String())
		}
		want[res.Task.ID] = c.String()
	}
	waitFor(t, "deliveries", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == len(want) })
	mu.Lock()
	defer mu.Unlock()
	for id, p := range want {
		if bodies[id] != p {
			t.Errorf("push body %q, want %q (as answered)", bodies[id], p)
		}
		if cts[id] != "application/json" {
			t.Errorf("push content type %q", cts[id])
		}
	}
}
