package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

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
