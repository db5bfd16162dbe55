package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
)

// fuzzBody feeds raw bytes as the JSON body of method path through the
// real handler (over a real store and engine). No input may produce a 5xx
// or a panic, and every response must be JSON.
// setup may prepare data and rewrite the path (and seeds).
func fuzzBody(f *testing.F, method, path string, setup func(e *env, path string, seeds []string) (string, []string), seeds ...string) {
	fuzzBodyThen(f, method, path, setup, nil, seeds...)
}

// fuzzBodyThen is fuzzBody with a further check of every answer below
// 500, given the body sent.
func fuzzBodyThen(f *testing.F, method, path string, setup func(e *env, path string, seeds []string) (string, []string),
	check func(t *testing.T, body []byte, rec *httptest.ResponseRecorder), seeds ...string) {
	e := newEnv(f, envOpts{sync: "OFF"}) // durability is irrelevant here; speed is not
	if setup != nil {
		path, seeds = setup(e, path, seeds)
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Bounded: a long-poll lease must not stall the fuzzer.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code == http.StatusServiceUnavailable && ctx.Err() != nil {
			return // the fuzzer's own deadline, on a loaded machine
		}
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body.Bytes())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %s %q: Content-Type %q", method, path, body, ct)
		}
		checkRefusal(t, fmt.Sprintf("%s %s %q", method, path, body), rec)
		if check != nil {
			check(t, body, rec)
		}
	})
}

// checkRefusal fails t unless a 4xx answer is an error body with a code
// and a message, and an invalid_field error names its field, first in
// the message too, so that the caller learns which input was wrong.
func checkRefusal(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code < 400 || rec.Code >= 500 {
		return
	}
	var b errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("%s: %d without an error code and message (%v): %s", what, rec.Code, err, rec.Body.Bytes())
	}
	if b.Error.Code != CodeInvalidField {
		return
	}
	if b.Error.Field == "" {
		// Only the body as a whole or the query string as a whole is
		// refused without naming a field.
		if !strings.HasPrefix(b.Error.Message, "the request body ") && !strings.HasPrefix(b.Error.Message, "malformed query string: ") {
			t.Fatalf("%s: %d invalid_field not naming its field: %s", what, rec.Code, rec.Body.Bytes())
		}
		return
	}
	if !strings.HasPrefix(b.Error.Message, b.Error.Field+": ") {
		t.Fatalf("%s: %d invalid_field whose message does not start with its field: %s", what, rec.Code, rec.Body.Bytes())
	}
}

// FuzzEnqueueBody: no body makes a 5xx, and a task the API creates is
// the one asked for (see checkEnqueued).
func FuzzEnqueueBody(f *testing.F) {
	fuzzBodyThen(f, "POST", "/v1/tasks", nil, func(t *testing.T, body []byte, rec *httptest.ResponseRecorder) {
		if rec.Code != http.StatusCreated {
			return
		}
		var in enqueueEcho
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("POST /v1/tasks %q answered %d, but encoding/json refuses the body: %v", body, rec.Code, err)
		}
		checkEnqueued(t, fmt.Sprintf("POST /v1/tasks %q", body), in, rec.Body.Bytes())
	},
		`{"type":"a","payload":{"x":[1,2,{"y":null}]},"priority":3,"max_attempts":2,"idempotency_key":"k"}`,
		`{"type":"a","delay_seconds":1.5}`,
		`{"type":"a","run_at":"2030-01-01T00:00:00.5+02:00"}`,
		`{"type":"a","run_at":"2030-01-01T00:00:00Z","delay_seconds":0}`,
		`{"type":"a","priority":1e400}`,
		`{"type":"\u0000"}`,
		`[]`, `null`, `{"type":"a"} x`, ``)
}

// FuzzBatchBody: no body makes a 5xx, and a batch the API takes creates
// the tasks asked for, in order (see checkEnqueued).
func FuzzBatchBody(f *testing.F) {
	fuzzBodyThen(f, "POST", "/v1/tasks/batch", nil, func(t *testing.T, body []byte, rec *httptest.ResponseRecorder) {
		if rec.Code != http.StatusCreated {
			return
		}
		var in struct{ Tasks []enqueueEcho }
		var out struct{ Tasks []json.RawMessage }
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("POST /v1/tasks/batch %q answered %d, but encoding/json refuses the body: %v", body, rec.Code, err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Tasks) != len(in.Tasks) {
			t.Fatalf("POST /v1/tasks/batch %q answered %d tasks for %d (%v): %s", body, len(out.Tasks), len(in.Tasks), err, rec.Body.Bytes())
		}
		for i := range in.Tasks {
			checkEnqueued(t, fmt.Sprintf("POST /v1/tasks/batch %q: tasks[%d]", body, i), in.Tasks[i], out.Tasks[i])
		}
	},
		`{"tasks":[{"type":"a"},{"type":"b","payload":1,"idempotency_key":"k"},{"type":"b","idempotency_key":"k"}]}`,
		`{"tasks":[{"type":"a","delay_seconds":-1}]}`,
		`{"tasks":[]}`, `{"tasks":[null]}`, `{"tasks":null}`)
}

func FuzzTypeBody(f *testing.F) {
	fuzzBody(f, "PUT", "/v1/types/fuzz", nil,
		`{"retry":{"backoff":"exponential","initial_delay_seconds":0.5,"multiplier":3,"max_delay_seconds":60,"max_doublings":2,"jitter":"full","jitter_fraction":0.5,"max_attempts":4,"retry_window_seconds":600,"retry_on":["503"],"no_retry_on":["400"]},"timeout_seconds":30,"priority":-2}`,
		`{"target":{"url":"https://example.com/x","method":"PUT","headers":{"A":"b"},"timeout_seconds":2,"concurrency":4}}`,
		`{"retry":{"initial_delay_seconds":1e30}}`,
		`{"retry":{"multiplier":-1}}`,
		`{"retry":null,"target":null}`, `{}`)
}

// enqueueEcho is an enqueue object as encoding/json reads it.
type enqueueEcho struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
	Priority       *int            `json:"priority"`
	DelaySeconds   *float64        `json:"delay_seconds"`
	RunAt          *string         `json:"run_at"`
	MaxAttempts    int             `json:"max_attempts"`
}

// checkEnqueued fails t unless the task answered for an enqueue object
// has its type, key, priority, attempt limit, run time (to the
// microsecond the store keeps) and payload (the same JSON value, number
// texts included). A duplicate answers an earlier task: only its key is
// checked.
func checkEnqueued(t *testing.T, what string, in enqueueEcho, answer []byte) {
	t.Helper()
	var out struct {
		Type           string          `json:"type"`
		Payload        json.RawMessage `json:"payload"`
		IdempotencyKey string          `json:"idempotency_key"`
		Priority       int             `json:"priority"`
		MaxAttempts    int             `json:"max_attempts"`
		RunAt          time.Time       `json:"run_at"`
		CreatedAt      time.Time       `json:"created_at"`
		Duplicate      bool            `json:"duplicate"`
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		t.Fatalf("%s: the answer is not a task: %v\n%s", what, err, answer)
	}
	if out.IdempotencyKey != in.IdempotencyKey {
		t.Fatalf("%s: answered the key %q", what, out.IdempotencyKey)
	}
	if out.Duplicate {
		return
	}
	if out.Type != in.Type || in.Priority != nil && out.Priority != *in.Priority || in.MaxAttempts > 0 && out.MaxAttempts != in.MaxAttempts {
		t.Fatalf("%s: answered %s", what, answer)
	}
	if in.RunAt != nil {
		want, err := time.Parse(time.RFC3339Nano, *in.RunAt)
		if d := want.Sub(out.RunAt); err != nil || d < 0 || d >= time.Microsecond {
			t.Fatalf("%s: runs at %v (%v)", what, out.RunAt, err)
		}
	}
	if in.DelaySeconds != nil {
		// The delay counts from the request's arrival; the task is created
		// when its (shared) insert commits, a little later.
		want := out.CreatedAt.Add(time.Duration(*in.DelaySeconds * float64(time.Second)))
		if d := want.Sub(out.RunAt); d < -time.Microsecond || d > time.Minute {
			t.Fatalf("%s: created at %v, runs at %v", what, out.CreatedAt, out.RunAt)
		}
	}
	given := []byte(in.Payload)
	if len(given) == 0 {
		given = []byte("null")
	}
	if !sameJSON(given, out.Payload) {
		t.Fatalf("%s: answered the payload %s", what, out.Payload)
	}
}

// sameJSON reports whether a and b hold the same JSON value, numbers
// compared as written.
func sameJSON(a, b []byte) bool {
	read := func(data []byte) (any, error) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	va, ea := read(a)
	vb, eb := read(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

// TestHandlerNeverPanicsOnRoutes is a quick sweep of odd requests over
// every route (method × path × body) that must never produce a 5xx.
func TestHandlerNeverPanicsOnRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	bodies := []string{"", "{}", "null", "[]", `{"x":1}`, `{"type":"a"}`, "{", `"s"`, "0"}
	for _, rt := range e.srv.routes {
		path := rt.pattern
		for _, p := range []struct{ from, to string }{{"{id}", "ID1"}, {"{type...}", "t"}, {"{lease_id}", "a.b"}} {
			path = strings.ReplaceAll(path, p.from, p.to)
		}
		for _, b := range bodies {
			for _, m := range []string{rt.method, "PATCH"} {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				req := httptest.NewRequestWithContext(ctx, m, path, bytes.NewReader([]byte(b)))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				e.srv.ServeHTTP(rec, req)
				timedOut := ctx.Err() != nil
				cancel()
				if rec.Code == http.StatusServiceUnavailable && timedOut {
					continue // the deadline (for long polls), on a loaded machine
				}
				if rec.Code >= 500 {
					t.Errorf("%s %s %q: %d %s", m, path, b, rec.Code, rec.Body.Bytes())
				}
				if m == "PATCH" && rec.Code != http.StatusMethodNotAllowed {
					t.Errorf("PATCH %s: %d", path, rec.Code)
				}
			}
		}
	}
}

// FuzzRedriveBody: no body makes a 5xx, and one that is not JSON selects
// nothing (see checkFilterRead).
func FuzzRedriveBody(f *testing.F) {
	fuzzBodyThen(f, "POST", "/v1/dlq/redrive", killSome, checkFilterRead, dlqBodySeeds...)
}

// FuzzPurgeBody: as FuzzRedriveBody, for purge.
func FuzzPurgeBody(f *testing.F) {
	fuzzBodyThen(f, "POST", "/v1/dlq/purge", killSome, checkFilterRead,
		append([]string{`{"older_than_seconds":3600}`, `{"older_than_seconds":-1}`, `{"older_than_seconds":1e300,"type":"a"}`}, dlqBodySeeds...)...)
}

// checkFilterRead fails t when a redrive or purge body that is neither
// empty (JSON white space only, which selects every dead task) nor valid
// JSON is answered other than 400: read as empty, it would act on the
// whole dead-letter queue.
func checkFilterRead(t *testing.T, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	if len(bytes.Trim(body, " \t\r\n")) > 0 && !json.Valid(body) && rec.Code != http.StatusBadRequest {
		t.Fatalf("body %q that is not JSON: got %d %s, want 400", body, rec.Code, rec.Body.Bytes())
	}
}

// dlqBodySeeds are filters of dead tasks for redrive and purge.
var dlqBodySeeds = []string{
	`{"type":"a","error_code":"E1","reason":"non_retryable","since":"2020-01-01T00:00:00Z","limit":1}`,
	`{"no_error_code":true,"error_code":"x"}`, `{"ids":[]}`, `{"ids":["01HXZ5K3J8T9M2Q4V6W8Y0A1B2","x"]}`,
	`{"error_code":"a\u0000b"}`, `{"ids":["\u0000"]}`, `{"type":"\ud800"}`, `{"since":"yesterday"}`, `{"limit":-1}`, ``,
	" \t\r\n", "\f", "\v", "\u00a0", "\u0085", "\u3000",
}

// killSome puts dead tasks in the DLQ for the fuzzed filters to select.
func killSome(e *env, path string, seeds []string) (string, []string) {
	for range 3 {
		e.enqueue(map[string]any{"type": "a"})
	}
	e.kill("a", "E1")
	return path, seeds
}

// FuzzTypeRoundTrip: a type configuration the API accepts is the one it
// keeps. The PUT's echo is what GET answers, and PUT again, the echo is
// accepted and answered unchanged: nothing is lost, added or reread
// differently on the way through the store.
func FuzzTypeRoundTrip(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	for _, s := range []string{
		`{"retry":{"backoff":"exponential","initial_delay_seconds":0.5,"multiplier":3,"max_delay_seconds":60,"max_doublings":2,"jitter":"full","jitter_fraction":0.5,"max_attempts":4,"retry_window_seconds":600,"retry_on":["503"],"no_retry_on":["400"]},"timeout_seconds":30,"priority":-2}`,
		`{"target":{"url":"https://u:p@example.com/x?q=1","method":"PUT","headers":{"A":"b","X-Key":"\u00e9"},"timeout_seconds":2.5,"concurrency":4}}`,
		`{"retry":{"backoff":"decorrelated","initial_delay_seconds":1e-9,"max_delay_seconds":9223372036.854775807}}`,
		`{"retry":{"backoff":"fixed","initial_delay_seconds":0.1234567891}, "timeout_seconds":0.000000001}`,
		`{"retry":{"retry_on":[],"no_retry_on":null},"target":{"url":"http://[::1]:9/"}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	// typeEcho is typeJSON as a client reads it.
	type typeEcho struct {
		Type           string         `json:"type"`
		Retry          retry.Policy   `json:"retry"`
		TimeoutSeconds float64        `json:"timeout_seconds"`
		Priority       int            `json:"priority"`
		Target         *engine.Target `json:"target"`
		UpdatedAt      string         `json:"updated_at"`
		Stored         bool           `json:"stored"`
	}
	do := func(t *testing.T, method string, body []byte) (int, typeEcho, []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, "/v1/types/fuzz.rt", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		var out typeEcho
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("%s: %v: %s", method, err, rec.Body.Bytes())
			}
		}
		return rec.Code, out, rec.Body.Bytes()
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		code, put, raw := do(t, "PUT", body)
		if code != http.StatusOK {
			return
		}
		_, got, graw := do(t, "GET", nil)
		if !reflect.DeepEqual(put, got) {
			t.Fatalf("PUT %s answered\n%s\nbut GET answers\n%s", body, raw, graw)
		}
		again, err := json.Marshal(map[string]any{"retry": put.Retry, "timeout_seconds": put.TimeoutSeconds, "priority": put.Priority, "target": put.Target})
		if err != nil {
			t.Fatal(err)
		}
		code, put2, raw2 := do(t, "PUT", again)
		if code != http.StatusOK {
			t.Fatalf("PUT %s answered\n%s\nbut its echo %s is refused: %d %s", body, raw, again, code, raw2)
		}
		put2.UpdatedAt = put.UpdatedAt
		if !reflect.DeepEqual(put, put2) {
			t.Fatalf("PUT %s answered\n%s\nbut its echo answers\n%s", body, raw, raw2)
		}
	})
}
