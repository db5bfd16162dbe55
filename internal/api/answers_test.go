package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestPayloadIsAnsweredAsStored: a task's payload comes back in the
// answers holding it byte for byte as it was stored (compacted), as push
// delivery sends it. Answers used to escape <, > and & (and a raw U+2028
// or U+2029) in payloads as \u003c and so on: the same JSON value, but
// not the bytes sent, so a worker checking a signature over them failed.
func TestPayloadIsAnsweredAsStored(t *testing.T) {
	e := newEnv(t, envOpts{})
	payload := "{\"html\":\"<b>a & b</b>\",\"ls\":\"\u2028\u2029\",\"esc\":\"\\u003c\\n\\\"\",\"n\":1.50e+10,\"big\":123456789012345678901234567890}"
	id := e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"p", "payload": `+payload+`}`).m["id"].(string)
	for _, path := range []string{"/v1/tasks/" + id, "/v1/tasks?type=p"} {
		r := e.must(http.StatusOK, "GET", path, nil)
		if !bytes.Contains(r.raw, []byte(`"payload":`+payload)) {
			t.Errorf("GET %s: payload not answered as sent:\nsent %s\ngot  %s", path, payload, r.raw)
		}
	}
	r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w1", "types": []string{"p"}, "wait_seconds": 5})
	if !bytes.Contains(r.raw, []byte(`"payload":`+payload)) {
		t.Errorf("POST /v1/leases: payload not answered as sent:\nsent %s\ngot  %s", payload, r.raw)
	}
}

// TestUnencodableAnswerIsAnInternalErrorWithRequestID: an answer that
// cannot be encoded (a stored payload that is not JSON, which no entry
// point lets in but a damaged database can hold) is a 500 whose body
// carries the request id, and the server log names the request id and
// the cause. It used to be a 500 without a request id, never logged.
func TestUnencodableAnswerIsAnInternalErrorWithRequestID(t *testing.T) {
	var logs requestLog
	e := newEnv(t, envOpts{log: slog.New(slog.NewTextHandler(&logs, nil))})
	id := "01BROKENPAYLOAD00000000000"
	_, err := e.st.InsertTasks(t.Context(), store.InsertParams{Now: time.Now(),
		Tasks: []store.NewTask{{ID: id, Type: "broken", Payload: json.RawMessage(`{"a":`)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/tasks/" + id, "/v1/tasks?type=broken"} {
		r := e.mustErr(http.StatusInternalServerError, CodeInternal, "", "GET", path, nil)
		rid := str2(r.m, "error", "request_id")
		if rid == "" || rid != r.header.Get("X-Request-Id") {
			t.Fatalf("GET %s: request_id %q, header %q", path, rid, r.header.Get("X-Request-Id"))
		}
		if l := logs.String(); !strings.Contains(l, "request_id="+rid) || !strings.Contains(l, "encode") {
			t.Fatalf("GET %s: log does not name request %s and the cause:\n%s", path, rid, l)
		}
	}
}
