package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func TestPullProtocol(t *testing.T) { backendtest.Run(t, testPullProtocol) }

func testPullProtocol(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	id := e.enqueue(map[string]any{"type": "img.resize", "payload": map[string]any{"w": 10}})["id"].(string)

	l := e.leaseOne("img.resize", map[string]any{"lease_seconds": 60})
	if l["id"] != id || l["attempt"] != 1.0 || l["type"] != "img.resize" || l["payload"].(map[string]any)["w"] != 10.0 {
		t.Fatalf("leased = %v", l)
	}
	lease := l["lease_id"].(string)
	exp := mustTime(t, l["lease_expires_at"])
	if d := time.Until(exp); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("lease expires in %v", d)
	}
	if e.state(id) != "running" {
		t.Fatal("not running")
	}
	// Nothing else to lease: an immediate answer with no tasks.
	if r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w2", "types": []string{"img.resize"}}); len(r.m["tasks"].([]any)) != 0 {
		t.Fatalf("second lease = %s", r)
	}

	hb := e.must(http.StatusOK, "POST", "/v1/leases/"+lease+"/heartbeat", map[string]any{"lease_seconds": 600}).m
	if d := time.Until(mustTime(t, hb["lease_expires_at"])); d < 590*time.Second {
		t.Fatalf("heartbeat expiry in %v", d)
	}
	e.must(http.StatusOK, "POST", "/v1/leases/"+lease+"/heartbeat", nil) // body optional

	c := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": lease}).m
	if c["state"] != "succeeded" {
		t.Fatalf("complete = %v", c)
	}
	g := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m
	as := g["attempts"].([]any)
	if g["state"] != "succeeded" || len(as) != 1 {
		t.Fatalf("task = %v", g)
	}
	a := as[0].(map[string]any)
	if a["number"] != 1.0 || a["worker_id"] != "w1" || a["outcome"] != "succeeded" || a["error"] != nil {
		t.Fatalf("attempt = %v", a)
	}
	mustTime(t, a["started_at"])
	mustTime(t, a["finished_at"])

	// The lease is gone: complete, fail and heartbeat are 409 lease_lost.
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": lease})
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": lease, "error": map[string]any{"message": "x"}})
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/leases/"+lease+"/heartbeat", nil)
	if e.state(id) != "succeeded" {
		t.Fatal("state changed")
	}
}

func TestFailRetryDecision(t *testing.T) { backendtest.Run(t, testFailRetryDecision) }

func testFailRetryDecision(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	e.must(http.StatusOK, "PUT", "/v1/types/flaky", map[string]any{
		"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.05, "jitter": "none", "max_attempts": 2},
	})
	id := e.enqueue(map[string]any{"type": "flaky"})["id"].(string)

	l := e.leaseOne("flaky", nil)
	f := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{
		"lease_id": l["lease_id"], "error": map[string]any{"code": "503", "message": "upstream unavailable"},
	}).m
	// retry_waiting for 50 ms; pending when the answer came later than
	// that (a loaded machine), the retry already due.
	if (f["state"] != "retry_waiting" && f["state"] != "pending") || f["delay_seconds"] != 0.05 || f["dead_reason"] != nil {
		t.Fatalf("fail 1 = %v", f)
	}
	if next := mustTime(t, f["next_run_at"]); f["state"] == "pending" && next.After(time.Now()) {
		t.Fatalf("fail 1 says pending, due at %v, in the future", next)
	}
	g := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m
	le := g["last_error"].(map[string]any)
	if le["code"] != "503" || le["message"] != "upstream unavailable" || le["class"] != "transient" {
		t.Fatalf("last_error = %v", le)
	}

	// The retry becomes due and is leased again (long poll), as attempt 2.
	l2 := e.leaseOne("flaky", nil)
	if l2["attempt"] != 2.0 || l2["lease_id"] == l["lease_id"] {
		t.Fatalf("second lease = %v", l2)
	}
	f2 := e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{
		"lease_id": l2["lease_id"], "error": map[string]any{"code": "503", "message": "still down", "retryable": true},
	}).m
	if f2["state"] != "dead" || f2["dead_reason"] != "max_attempts" || f2["next_run_at"] != nil {
		t.Fatalf("fail 2 = %v", f2)
	}
	g = e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m
	if g["state"] != "dead" || g["dead_reason"] != "max_attempts" || len(g["attempts"].([]any)) != 2 {
		t.Fatalf("dead task = %v", g)
	}
	a := g["attempts"].([]any)[0].(map[string]any)
	if a["outcome"] != "failed" || a["delay_seconds"] != 0.05 || a["error"].(map[string]any)["code"] != "503" {
		t.Fatalf("attempt 1 = %v", a)
	}

	// A permanent failure goes straight to the DLQ.
	id2 := e.enqueue(map[string]any{"type": "flaky"})["id"].(string)
	l3 := e.leaseOne("flaky", nil)
	f3 := e.must(http.StatusOK, "POST", "/v1/tasks/"+id2+"/fail", map[string]any{
		"lease_id": l3["lease_id"], "error": map[string]any{"message": "bad input", "retryable": false},
	}).m
	if f3["state"] != "dead" || f3["dead_reason"] != "non_retryable" {
		t.Fatalf("permanent fail = %v", f3)
	}
}

func TestExpiredAndSupersededLease(t *testing.T) { backendtest.Run(t, testExpiredAndSupersededLease) }

func testExpiredAndSupersededLease(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	e.must(http.StatusOK, "PUT", "/v1/types/slow", map[string]any{
		"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.01, "jitter": "none"},
	})
	id := e.enqueue(map[string]any{"type": "slow"})["id"].(string)
	old := e.leaseOne("slow", map[string]any{"lease_seconds": 30})["lease_id"].(string)

	e.clock.Advance(time.Minute) // the lease has expired
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": old})
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/leases/"+old+"/heartbeat", nil)
	if st := e.state(id); st == "succeeded" {
		t.Fatalf("expired lease completed the task")
	}

	// The reaper retries the task; another worker leases it: the old lease
	// is superseded and still refused, the new one works.
	waitFor(t, "the expired lease to be reaped", 10*time.Second, func() bool { return e.state(id) != "running" })
	e.clock.Advance(time.Second)
	fresh := e.leaseOne("slow", nil)
	if fresh["attempt"] != 2.0 {
		t.Fatalf("re-leased = %v", fresh)
	}
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": old, "error": map[string]any{"message": "late"}})
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": old})
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": fresh["lease_id"]})
	g := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m
	as := g["attempts"].([]any)
	if g["state"] != "succeeded" || len(as) != 2 || as[0].(map[string]any)["outcome"] != "lease_expired" {
		t.Fatalf("task = %v", g)
	}
}

func TestLongPollWakesPromptly(t *testing.T) { backendtest.Run(t, testLongPollWakesPromptly) }

func testLongPollWakesPromptly(t *testing.T, backend string) {
	// A 5s poll interval: only the enqueue wake-up can answer within 2s.
	e := newEnv(t, envOpts{backend: backend, poll: 5 * time.Second})
	entered := make(chan struct{})
	inner := e.srv.mux
	wrapped := http.NewServeMux()
	wrapped.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/leases" {
			close(entered)
		}
		inner.ServeHTTP(w, r)
	})
	e.srv.mux = wrapped

	done := make(chan *resp, 1)
	start := time.Now()
	go func() {
		done <- e.doCtx(context.Background(), "POST", "/v1/leases", map[string]any{"worker_id": "w", "types": []string{"poll"}, "wait_seconds": 20})
	}()
	<-entered
	id := e.enqueue(map[string]any{"type": "poll"})["id"].(string)
	enqueued := time.Now()
	select {
	case r := <-done:
		ts := r.m["tasks"].([]any)
		if r.status != 200 || len(ts) != 1 || ts[0].(map[string]any)["id"] != id {
			t.Fatalf("long poll = %s", r)
		}
		t.Logf("long poll answered %v after the enqueue (%v after the request)", time.Since(enqueued), time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("long poll did not return within 2s of the enqueue")
	}

	// With nothing to lease, a long poll returns empty after wait_seconds.
	e.srv.mux = inner
	start = time.Now()
	r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w", "types": []string{"none"}, "wait_seconds": 0.3})
	if len(r.m["tasks"].([]any)) != 0 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("empty long poll = %s after %v", r, time.Since(start))
	}
}

func TestLeaseValidation(t *testing.T) { backendtest.Run(t, testLeaseValidation) }

func testLeaseValidation(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	for _, c := range []struct{ body, code, field string }{
		{`{"types":["a"]}`, CodeInvalidField, "worker_id"},
		{`{"worker_id":"w\u0000","types":["a"]}`, CodeInvalidField, "worker_id"},
		{`{"worker_id":"w"}`, CodeInvalidField, "types"},
		{`{"worker_id":"w","types":["bad type"]}`, CodeInvalidField, "types[0]"},
		{`{"worker_id":"w","types":["a"],"max":101}`, CodeInvalidField, "max"},
		{`{"worker_id":"w","types":["a"],"max":-1}`, CodeInvalidField, "max"},
		{`{"worker_id":"w","types":["a"],"wait_seconds":31}`, CodeInvalidField, "wait_seconds"},
		{`{"worker_id":"w","types":["a"],"wait_seconds":-1}`, CodeInvalidField, "wait_seconds"},
		{`{"worker_id":"w","types":["a"],"lease_seconds":3601}`, CodeInvalidField, "lease_seconds"},
		{`{"worker_id":"w","types":["a"],"lease_seconds":1e-10}`, CodeInvalidField, "lease_seconds"},
		{`{"worker_id":"w","types":"a"}`, CodeInvalidField, "types"},
		{`{"worker_id":"w","types":["a"],"extra":true}`, CodeInvalidField, "extra"},
		{``, CodeMalformedJSON, ""},
		{`{"worker_id":"w","types":["t` + strings.Repeat(`","t`, store.MaxFetchTypes) + `"]}`, CodeInvalidField, "types"},
	} {
		e.mustErr(http.StatusBadRequest, c.code, c.field, "POST", "/v1/leases", c.body)
	}
	id := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	lease := e.leaseOne("a", nil)["lease_id"].(string)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "lease_id", "POST", "/v1/leases/garbage/heartbeat", nil)
	// A lease id that is not text (a NUL byte, invalid UTF-8) was not
	// issued by this server, on either backend: no database error leaks.
	for _, bad := range []string{id + ".%00", id + ".%FF", "%FF." + strings.SplitN(lease, ".", 2)[1]} {
		r := e.mustErr(http.StatusBadRequest, CodeInvalidField, "lease_id", "POST", "/v1/leases/"+bad+"/heartbeat", nil)
		if strings.Contains(r.errMsg(), "SQLSTATE") || strings.Contains(r.errMsg(), "extend leases") {
			t.Fatalf("heartbeat of lease %s: the answer leaks the database's error: %s", bad, r)
		}
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "lease_seconds", "POST", "/v1/leases/"+lease+"/heartbeat", `{"lease_seconds":-2}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "lease_id", "POST", "/v1/tasks/"+id+"/complete", `{}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "lease_id", "POST", "/v1/tasks/"+id+"/complete", `{"lease_id":"nodot"}`)
	e.mustErr(http.StatusBadRequest, CodeMalformedJSON, "", "POST", "/v1/tasks/"+id+"/complete", nil)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "error", "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": lease})
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "error.message", "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": lease, "error": map[string]any{"code": "x"}})
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "error.retry_after_seconds", "POST", "/v1/tasks/"+id+"/fail",
		map[string]any{"lease_id": lease, "error": map[string]any{"message": "x", "retry_after_seconds": -1}})
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "error.retryable", "POST", "/v1/tasks/"+id+"/fail",
		`{"lease_id":"`+lease+`","error":{"message":"x","retryable":"yes"}}`)
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "error.bogus", "POST", "/v1/tasks/"+id+"/fail",
		`{"lease_id":"`+lease+`","error":{"message":"x","bogus":1}}`)
	// A lease of another task, and an unknown task.
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/OTHERTASK/complete", map[string]any{"lease_id": lease})
	e.mustErr(http.StatusNotFound, CodeNotFound, "", "POST", "/v1/tasks/NOSUCH/complete", map[string]any{"lease_id": "NOSUCH.x"})
	// After all that the lease still works.
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": lease})
}

// TestFailReportTextMustBeUnicode: a failed attempt's error code is matched
// byte for byte against the type's retry_on and no_retry_on lists and the
// dead-letter filters, so a code (or message) that is not valid Unicode as
// sent is a 400 naming it, as other text fields are, not silently turned
// into U+FFFD; the lease is kept for a corrected report.
func TestFailReportTextMustBeUnicode(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	lease := e.leaseOne("a", nil)["lease_id"].(string)
	for _, c := range []struct{ errJSON, field string }{
		{"{\"code\":\"E\xff\",\"message\":\"x\"}", "error.code"},
		{`{"code":"E\ud800","message":"x"}`, "error.code"},
		{"{\"message\":\"bad \xfe\"}", "error.message"},
		{`{"message":"\udc00"}`, "error.message"},
	} {
		e.mustErr(http.StatusBadRequest, CodeInvalidField, c.field, "POST", "/v1/tasks/"+id+"/fail",
			`{"lease_id":"`+lease+`","error":`+c.errJSON+`}`)
	}
	if st := e.state(id); st != store.StateRunning {
		t.Fatalf("task %s after refused reports, want running", st)
	}
	e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": lease, "error": map[string]any{"code": "E1", "message": "é"}})
}

func TestLeaseAnswerBoundedByPayloadBytes(t *testing.T) {
	backendtest.Run(t, testLeaseAnswerBoundedByPayloadBytes)
}

// testLeaseAnswerBoundedByPayloadBytes: a pull worker asking for many tasks
// with large payloads gets them across several lease answers, each holding
// at most engine.DefaultFetchBytes of payloads (save a single task), and
// every task exactly once.
func testLeaseAnswerBoundedByPayloadBytes(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend, maxBody: 2 << 20})
	const n, size = 4, 1500 << 10
	ids := map[string]bool{}
	for i := range n {
		id := e.enqueue(map[string]any{"type": "big", "payload": strings.Repeat(string(rune('a'+i)), size)})["id"].(string)
		ids[id] = true
	}
	got := map[string]bool{}
	for calls := 0; len(got) < n; calls++ {
		if calls > n {
			t.Fatalf("leased %d of %d tasks after %d calls", len(got), n, calls)
		}
		r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w1", "types": []string{"big"}, "max": 100})
		tasks := r.m["tasks"].([]any)
		if len(tasks) == 0 {
			t.Fatalf("call %d leased nothing, %d of %d tasks leased", calls, len(got), n)
		}
		bytes := 0
		for _, x := range tasks {
			tk := x.(map[string]any)
			id := tk["id"].(string)
			if !ids[id] || got[id] {
				t.Fatalf("call %d leased %s (known %v, already leased %v)", calls, id, ids[id], got[id])
			}
			got[id] = true
			bytes += len(tk["payload"].(string)) + 2 // the JSON string's quotes
		}
		if len(tasks) > 1 && bytes > engine.DefaultFetchBytes {
			t.Fatalf("call %d leased %d tasks with %d payload bytes, bound %d", calls, len(tasks), bytes, engine.DefaultFetchBytes)
		}
	}
	if r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w1", "types": []string{"big"}}); len(r.m["tasks"].([]any)) != 0 {
		t.Fatalf("lease after all = %d tasks", len(r.m["tasks"].([]any)))
	}
}
