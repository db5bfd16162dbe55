package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func TestEnqueueGetList(t *testing.T) { backendtest.Run(t, testEnqueueGetList) }

func testEnqueueGetList(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	before := time.Now().Add(-time.Second)
	r := e.must(http.StatusCreated, "POST", "/v1/tasks", map[string]any{
		"type": "email.send", "payload": map[string]any{"to": "a@example.com"}, "priority": 5, "max_attempts": 3,
	})
	task := r.m
	id, _ := task["id"].(string)
	if len(id) != 26 || task["type"] != "email.send" || task["state"] != "pending" || task["priority"] != 5.0 ||
		task["attempt"] != 0.0 || task["max_attempts"] != 3.0 || task["last_error"] != nil {
		t.Fatalf("enqueued task = %s", r.raw)
	}
	if _, ok := task["last_error"]; !ok {
		t.Fatalf("last_error missing (want null): %s", r.raw)
	}
	if _, ok := task["duplicate"]; ok {
		t.Fatalf("duplicate present on a fresh task: %s", r.raw)
	}
	if _, ok := task["idempotency_key"]; ok {
		t.Fatalf("empty idempotency_key not omitted: %s", r.raw)
	}
	if p := task["payload"].(map[string]any); p["to"] != "a@example.com" {
		t.Fatalf("payload = %v", p)
	}
	for _, k := range []string{"run_at", "created_at", "updated_at"} {
		if tt := mustTime(t, task[k]); tt.Before(before) {
			t.Fatalf("%s = %v", k, tt)
		}
	}

	// Idempotency: 200 with the existing task and duplicate=true.
	first := e.must(http.StatusCreated, "POST", "/v1/tasks", map[string]any{"type": "email.send", "idempotency_key": "k1"}).m
	dup := e.must(http.StatusOK, "POST", "/v1/tasks", map[string]any{"type": "email.send", "idempotency_key": "k1", "payload": 7}).m
	if dup["id"] != first["id"] || dup["duplicate"] != true || dup["idempotency_key"] != "k1" {
		t.Fatalf("duplicate = %v, first = %v", dup, first)
	}

	// Get: with the (empty) attempt history; default max_attempts from the policy.
	g := e.must(http.StatusOK, "GET", "/v1/tasks/"+first["id"].(string), nil).m
	if as, ok := g["attempts"].([]any); !ok || len(as) != 0 || g["max_attempts"] != 5.0 {
		t.Fatalf("get = %v", g)
	}
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "GET", "/v1/tasks/01NOSUCHTASK0000000000000", nil)

	// List with filters and pagination.
	e.enqueue(map[string]any{"type": "other"})
	l := e.must(http.StatusOK, "GET", "/v1/tasks?type=email.send&state=pending,scheduled&limit=1", nil).m
	ts := l["tasks"].([]any)
	if len(ts) != 1 || l["next_cursor"] == nil {
		t.Fatalf("page 1 = %v", l)
	}
	l2 := e.must(http.StatusOK, "GET", "/v1/tasks?type=email.send&state=pending,scheduled&limit=1&cursor="+l["next_cursor"].(string), nil).m
	ts2 := l2["tasks"].([]any)
	if len(ts2) != 1 || ts2[0].(map[string]any)["id"] == ts[0].(map[string]any)["id"] || l2["next_cursor"] != nil {
		t.Fatalf("page 2 = %v", l2)
	}
	all := e.must(http.StatusOK, "GET", "/v1/tasks", nil).m
	if len(all["tasks"].([]any)) != 3 {
		t.Fatalf("all = %v", all)
	}
	if _, ok := all["next_cursor"]; !ok {
		t.Fatalf("next_cursor missing: %v", all)
	}

	for _, c := range []struct{ q, field string }{
		{"limit=0", "limit"}, {"limit=1001", "limit"}, {"limit=x", "limit"}, {"state=bogus", "state"},
		{"state=pending,nope", "state"}, {"cursor=%27%3B--", "cursor"}, {"type=bad%20type", "type"},
		{"foo=1", "foo"}, {"limit=1&limit=2", "limit"}, {"cursor=zzzz", "cursor"},
		{"cursor=01M8M402V5M1K3F32VPSJM7WHU", "cursor"}, // U is not in the alphabet
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "GET", "/v1/tasks?"+c.q, nil)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "", "GET", "/v1/tasks?%zz", nil)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "id", "GET", "/v1/tasks/a%00b", nil)
}

func TestEnqueueValidation(t *testing.T) { backendtest.Run(t, testEnqueueValidation) }

func testEnqueueValidation(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	for _, c := range []struct {
		body, code, field string
	}{
		{`{}`, CodeInvalidField, "type"},
		{`{"type":""}`, CodeInvalidField, "type"},
		{`{"type":"has space"}`, CodeInvalidField, "type"},
		{`{"type":"` + strings.Repeat("x", 129) + `"}`, CodeInvalidField, "type"},
		{`{"type":"a","bogus":1}`, CodeInvalidField, "bogus"},
		{`{"type":"a"} {}`, CodeMalformedJSON, ""},
		{`{"type":"a"}}`, CodeMalformedJSON, ""},
		{`{"type":"a"`, CodeMalformedJSON, ""},
		{`{"type":"a",}`, CodeMalformedJSON, ""},
		{`[1,2]`, CodeInvalidField, ""},
		{`"str"`, CodeInvalidField, ""},
		{`{"type":1}`, CodeInvalidField, "type"},
		{`{"type":"a","priority":"high"}`, CodeInvalidField, "priority"},
		{`{"type":"a","priority":1.5}`, CodeInvalidField, "priority"},
		{`{"type":"a","priority":1e30}`, CodeInvalidField, "priority"},
		{`{"type":"a","priority":2000000}`, CodeInvalidField, "priority"},
		{`{"type":"a","max_attempts":-1}`, CodeInvalidField, "max_attempts"},
		{`{"type":"a","delay_seconds":-1}`, CodeInvalidField, "delay_seconds"},
		{`{"type":"a","idempotency_key":"x\u0000y"}`, CodeInvalidField, "idempotency_key"},
		{`{"type":"a","delay_seconds":1e300}`, CodeInvalidField, "delay_seconds"},
		{`{"type":"a","run_at":"tomorrow"}`, CodeInvalidField, "run_at"},
		{`{"type":"a","run_at":"2030-01-01T00:00:00Z","delay_seconds":1}`, CodeInvalidField, "run_at"},
		{`{"type":"a","idempotency_key":"` + strings.Repeat("k", 256) + `"}`, CodeInvalidField, "idempotency_key"},
		{`{"type":"a","payload":}`, CodeMalformedJSON, ""},
		{` `, CodeMalformedJSON, ""},
	} {
		r := e.do("POST", "/v1/tasks", c.body)
		if r.status != http.StatusBadRequest || r.errCode() != c.code || (c.field != "" && r.errField() != c.field) {
			t.Errorf("body %.60s: got %s, want 400 %s field %q", c.body, r, c.code, c.field)
		}
		if c.field != "" && !strings.Contains(r.errMsg(), c.field) {
			t.Errorf("body %.60s: message %q does not name %s", c.body, r.errMsg(), c.field)
		}
	}
	if n := len(e.must(http.StatusOK, "GET", "/v1/tasks", nil).m["tasks"].([]any)); n != 0 {
		t.Fatalf("%d tasks enqueued by invalid requests", n)
	}
}

func TestEnqueueSchedule(t *testing.T) { backendtest.Run(t, testEnqueueSchedule) }

func testEnqueueSchedule(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	now := time.Now()
	d := e.enqueue(map[string]any{"type": "a", "delay_seconds": 3600.5})
	if d["state"] != "scheduled" {
		t.Fatalf("delayed task = %v", d)
	}
	if at := mustTime(t, d["run_at"]); at.Sub(now) < 3600*time.Second || at.Sub(now) > 3610*time.Second {
		t.Fatalf("run_at = %v, now %v", at, now)
	}
	want := time.Date(2100, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	r := e.enqueue(map[string]any{"type": "a", "run_at": "2100-01-02T04:04:05.6+01:00"})
	if got := mustTime(t, r["run_at"]); !got.Equal(want) || r["state"] != "scheduled" {
		t.Fatalf("run_at = %v (%v), want %v", r["run_at"], r["state"], want)
	}
	p := e.enqueue(map[string]any{"type": "a", "run_at": "2000-01-01T00:00:00Z", "payload": nil})
	if p["state"] != "pending" || p["payload"] != nil {
		t.Fatalf("past run_at = %v", p)
	}
}

func TestBatch(t *testing.T) { backendtest.Run(t, testBatch) }

func testBatch(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	existing := e.enqueue(map[string]any{"type": "a", "idempotency_key": "dup"})
	r := e.must(http.StatusCreated, "POST", "/v1/tasks/batch", map[string]any{"tasks": []any{
		map[string]any{"type": "a", "payload": 1},
		map[string]any{"type": "b", "delay_seconds": 60},
		map[string]any{"type": "a", "idempotency_key": "dup"},
	}})
	ts := r.m["tasks"].([]any)
	if len(ts) != 3 {
		t.Fatalf("batch = %s", r.raw)
	}
	t0, t1, t2 := ts[0].(map[string]any), ts[1].(map[string]any), ts[2].(map[string]any)
	if t0["payload"] != 1.0 || t1["state"] != "scheduled" || t2["id"] != existing["id"] || t2["duplicate"] != true || t0["duplicate"] != nil {
		t.Fatalf("batch = %s", r.raw)
	}

	count := func() int { return len(e.must(http.StatusOK, "GET", "/v1/tasks", nil).m["tasks"].([]any)) }
	n := count()
	// Atomic: one invalid task rejects the batch, naming it.
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[1].type", "POST", "/v1/tasks/batch",
		`{"tasks":[{"type":"ok"},{"type":"bad type"}]}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[0].nope", "POST", "/v1/tasks/batch", `{"tasks":[{"type":"ok","nope":1}]}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[2].delay_seconds", "POST", "/v1/tasks/batch",
		`{"tasks":[{"type":"ok"},{"type":"ok"},{"type":"ok","delay_seconds":-3}]}`)
	e.mustErr(http.StatusBadRequest, CodeMalformedJSON, "", "POST", "/v1/tasks/batch", `{"tasks":[{"type":"ok"},{"type":}]}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks", "POST", "/v1/tasks/batch", `{"tasks":[]}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks", "POST", "/v1/tasks/batch", `{}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[0]", "POST", "/v1/tasks/batch", `{"tasks":[7]}`)
	big := make([]any, MaxAPIBatch+1)
	for i := range big {
		big[i] = map[string]any{"type": "a"}
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks", "POST", "/v1/tasks/batch", map[string]any{"tasks": big})
	if got := count(); got != n {
		t.Fatalf("rejected batches inserted tasks: %d -> %d", n, got)
	}
}

func TestCancelAndRetry(t *testing.T) { backendtest.Run(t, testCancelAndRetry) }

func testCancelAndRetry(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	id := e.enqueue(map[string]any{"type": "a"})["id"].(string)

	c := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/cancel", nil).m
	if c["state"] != "cancelled" {
		t.Fatalf("cancel = %v", c)
	}
	r := e.mustErr(http.StatusConflict, CodeConflict, "", "POST", "/v1/tasks/"+id+"/cancel", "{}")
	if want := fmt.Sprintf("cannot cancel task %s in state cancelled", id); r.errMsg() != want {
		t.Fatalf("message %q, want %q", r.errMsg(), want)
	}
	rt := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/retry", "").m
	if rt["state"] != "pending" {
		t.Fatalf("retry = %v", rt)
	}
	r = e.mustErr(http.StatusConflict, CodeConflict, "", "POST", "/v1/tasks/"+id+"/retry", nil)
	if want := fmt.Sprintf("cannot retry task %s in state pending", id); r.errMsg() != want {
		t.Fatalf("message %q, want %q", r.errMsg(), want)
	}
	// Succeeded tasks cannot be retried or cancelled.
	l := e.leaseOne("a", nil)
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": l["lease_id"]})
	r = e.mustErr(http.StatusConflict, CodeConflict, "", "POST", "/v1/tasks/"+id+"/retry", nil)
	if want := fmt.Sprintf("cannot retry task %s in state succeeded", id); r.errMsg() != want {
		t.Fatalf("message %q, want %q", r.errMsg(), want)
	}
	e.mustErr(http.StatusConflict, CodeConflict, "", "POST", "/v1/tasks/"+id+"/cancel", nil)

	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "/v1/tasks/NOSUCH/cancel", nil)
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "/v1/tasks/NOSUCH/retry", nil)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "x", "POST", "/v1/tasks/"+id+"/retry", `{"x":1}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "id", "POST", "/v1/tasks/"+strings.Repeat("A", 65)+"/cancel", nil)
}

// TestRunAtOutsideRFC3339Range: run_at is accepted in any offset, but an
// instant whose UTC year falls outside 0001..9999 would be written back (in
// the 201, in GET and in every list page holding the task) as a string that
// is not RFC 3339, which clients such as `retryq tasks list` cannot decode.
// Such input is a 400 naming run_at; it used to be stored.
func TestRunAtOutsideRFC3339Range(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, runAt := range []string{"0000-01-01T00:00:00+01:00", "9999-12-31T23:00:00-02:00"} {
		r := e.do("POST", "/v1/tasks", map[string]any{"type": "rq.time", "run_at": runAt})
		if r.status != http.StatusBadRequest || r.errField() != "run_at" {
			t.Errorf("run_at %q: got %d %s; want 400 on run_at", runAt, r.status, r.raw)
		}
	}
	// The extremes that stay in range are taken, and every list page reads
	// back as times.
	for _, runAt := range []string{"0001-01-02T01:00:00+01:00", "9999-12-31T23:00:00+02:00"} {
		e.must(http.StatusCreated, "POST", "/v1/tasks", map[string]any{"type": "rq.time", "run_at": runAt})
	}
	page := e.must(http.StatusOK, "GET", "/v1/tasks?type=rq.time", nil)
	var typed struct {
		Tasks []struct {
			RunAt time.Time `json:"run_at"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(page.raw, &typed); err != nil {
		t.Errorf("GET /v1/tasks: a client decoding run_at as time.Time fails: %v", err)
	}
}

// hookedStore is a real store whose ListAttempts first runs a hook, once:
// a test commits a transition there, between the two reads of a GET.
type hookedStore struct {
	store.Store
	beforeAttempts atomic.Pointer[func()]
}

func (h *hookedStore) ListAttempts(ctx context.Context, id string) ([]store.Attempt, error) {
	if f := h.beforeAttempts.Swap(nil); f != nil {
		(*f)()
	}
	return h.Store.ListAttempts(ctx, id)
}

func TestGetTaskShowsOneMomentOfTaskAndHistory(t *testing.T) {
	backendtest.Run(t, testGetTaskShowsOneMomentOfTaskAndHistory)
}

// A GET of a task reads the task and then its history: an outcome
// committed in between must not pair the task as it was before with the
// history as it is after (a running task whose attempt is already recorded
// as finished).
func testGetTaskShowsOneMomentOfTaskAndHistory(t *testing.T, backend string) {
	hs := &hookedStore{}
	e := newEnv(t, envOpts{backend: backend, wrap: func(st store.Store) store.Store { hs.Store = st; return hs }})
	for _, outcome := range []string{"fail", "complete"} {
		id := e.enqueue(map[string]any{"type": "snap"})["id"].(string)
		lease := e.leaseOne("snap", map[string]any{"lease_seconds": 60})["lease_id"].(string)
		hook := func() {
			var err error
			if outcome == "fail" {
				_, err = e.eng.Fail(context.Background(), id, lease, engine.ReportedError{Code: "503", Message: "down"})
			} else {
				err = e.eng.Complete(context.Background(), id, lease)
			}
			if err != nil {
				t.Errorf("%s in the hook: %v", outcome, err)
			}
		}
		hs.beforeAttempts.Store(&hook)
		g := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m
		as := g["attempts"].([]any)
		if g["state"] == "running" && len(as) != 0 || g["state"] != "running" && len(as) != 1 {
			t.Fatalf("%s: task in state %v with %d finished attempts: %v", outcome, g["state"], len(as), g)
		}
	}
}

// TestPayloadsThatAreNotUTF8AreRefused: a payload is stored as sent, so one
// holding bytes that are not UTF-8 would be written back raw in the 201,
// in GET, in every list page and in pull leases, answers that are then not
// JSON (RFC 8259 requires UTF-8) and that strict clients cannot decode.
// Such a payload is a 400 naming it, in a batch with the task's index, as
// in the Go API; a surrogate escape stays ASCII and is taken as sent.
func TestPayloadsThatAreNotUTF8AreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, body := range []string{
		"{\"type\":\"a\",\"payload\":\"\xff\"}",
		"{\"type\":\"a\",\"payload\":{\"k\":\"caf\xc3\"}}",
		"{\"type\":\"a\",\"payload\":[\"\xed\xa0\x80\"]}",
	} {
		r := e.mustErr(http.StatusBadRequest, CodeInvalidField, "payload", "POST", "/v1/tasks", body)
		if !utf8.Valid(r.raw) {
			t.Errorf("body %q: the error answer is not UTF-8: %q", body, r.raw)
		}
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "tasks[1].payload", "POST", "/v1/tasks/batch",
		"{\"tasks\":[{\"type\":\"a\"},{\"type\":\"a\",\"payload\":\"\xff\"}]}")
	if n := len(e.must(http.StatusOK, "GET", "/v1/tasks", nil).m["tasks"].([]any)); n != 0 {
		t.Fatalf("%d tasks enqueued with payloads that are not UTF-8", n)
	}
	r := e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a","payload":"\ud800 \u00e9"}`)
	if !utf8.Valid(r.raw) || r.m["payload"] == nil {
		t.Fatalf("a payload with escapes: %s", r)
	}
}

// TestPayloadLimitIsTheEngines: a server whose body limit was raised above
// engine.MaxPayloadBytes still refuses a larger payload, with a 400 naming
// it, as the Go API does: every answer holding the task would carry it.
// A payload of exactly the limit is taken.
func TestPayloadLimitIsTheEngines(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 4 * engine.MaxPayloadBytes})
	over := `{"type":"a","payload":"` + strings.Repeat("x", engine.MaxPayloadBytes-1) + `"}`
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "payload", "POST", "/v1/tasks", over)
	at := `{"type":"a","payload":"` + strings.Repeat("x", engine.MaxPayloadBytes-2) + `"}`
	e.must(http.StatusCreated, "POST", "/v1/tasks", at)
}
