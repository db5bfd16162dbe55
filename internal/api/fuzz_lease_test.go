package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// The fuzz targets of the pull-worker routes act on a fresh lease (or
// fresh tasks) for each input, so that what one input consumed does not
// leave the others only refusals, and check what an accepted request did.

// FuzzHeartbeatBody sends a heartbeat with an arbitrary body on a fresh
// one-hour lease each time. No body makes a 5xx, and a heartbeat the API
// takes sets the expiry it answers and the task keeps: lease_seconds from
// now, or without them (0) never less than the lease had.
func FuzzHeartbeatBody(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	for _, s := range []string{
		`{"lease_seconds":30}`, `{"lease_seconds":0.5}`, `{}`, `{"lease_seconds":null}`, `{"lease_seconds":0}`,
		`{"lease_seconds":-1}`, `{"lease_seconds":1e300}`, `{"lease_seconds":1e-12}`, `{"lease_seconds":"30"}`, ``,
		`{"lease_seconds":86400}`, `{"lease_seconds":0.0000015}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, lease, leased := e.freshLease(t)
		path := "/v1/leases/" + lease + "/heartbeat"
		before := e.clock.Now()
		rec := e.serve(ctx, "POST", path, body)
		after := e.clock.Now()
		what := fmt.Sprintf("POST %s %q", path, body)
		if !fuzzAnswered(t, what, rec) {
			return
		}
		var in struct {
			LeaseSeconds *float64 `json:"lease_seconds"`
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				t.Fatalf("%s answered 200, but encoding/json refuses the body: %v", what, err)
			}
		}
		var out struct {
			LeaseExpiresAt time.Time `json:"lease_expires_at"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: answer %s: %v", what, rec.Body.Bytes(), err)
		}
		lo, hi := leased, leased // kept: the default pull lease is shorter
		if in.LeaseSeconds != nil && *in.LeaseSeconds > 0 {
			d := time.Duration(math.Round(*in.LeaseSeconds * 1e9))
			lo, hi = before.Add(d-time.Microsecond), after.Add(d)
		}
		if out.LeaseExpiresAt.Before(lo) || out.LeaseExpiresAt.After(hi) {
			t.Fatalf("%s: lease expires at %v, want between %v and %v", what, out.LeaseExpiresAt, lo, hi)
		}
	})
}

// FuzzCompleteBody completes a fresh lease's task with an arbitrary body
// ("LEASE" in it becomes the lease, "OTHER" another task's live lease). No
// body makes a 5xx, and a completion the API takes is one with the task's
// own lease, and the task is then succeeded.
func FuzzCompleteBody(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	for _, s := range []string{
		`{"lease_id":"x.y"}`, `{"lease_id":""}`, `{"lease_id":"\ud800"}`, `{"lease_id":1}`,
		`{"lease_id":"x.y","x":1}`, `{"lease_id":"LEASE"}`, `{"lease_id":"OTHER"}`, `{"LEASE_ID":"LEASE"}`,
		`{"lease_id":"LEASE","lease_id":"LEASE"}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	_, other, _ := e.freshLease(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		id, lease, _ := e.freshLease(t)
		body := bytes.ReplaceAll(bytes.ReplaceAll(raw, []byte("LEASE"), []byte(lease)), []byte("OTHER"), []byte(other))
		path := "/v1/tasks/" + id + "/complete"
		rec := e.serve(ctx, "POST", path, body)
		what := fmt.Sprintf("POST %s %q", path, body)
		if !fuzzAnswered(t, what, rec) {
			return
		}
		var in struct {
			LeaseID string `json:"lease_id"`
		}
		if err := json.Unmarshal(body, &in); err != nil || in.LeaseID != lease {
			t.Fatalf("%s answered 200 for the lease %q (%v), not the task's %q", what, in.LeaseID, err, lease)
		}
		rec = e.serve(ctx, "GET", "/v1/tasks/"+id, nil)
		var task struct {
			State store.State `json:"state"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &task); err != nil || task.State != store.StateSucceeded {
			t.Fatalf("%s answered 200, but the task is %d %s", what, rec.Code, rec.Body.Bytes())
		}
	})
}

// FuzzLeaseBody leases with an arbitrary body, two tasks of type "a"
// enqueued before each input. No body makes a 5xx, and a lease the API
// grants holds at most max tasks (default 1), each of a type asked for,
// leased for lease_seconds when given.
func FuzzLeaseBody(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	for _, s := range []string{
		`{"worker_id":"w","types":["a"],"max":2,"wait_seconds":0,"lease_seconds":1.5}`,
		`{"worker_id":"w","types":["a","b"],"wait_seconds":30}`,
		`{"worker_id":"w","types":[],"max":0}`,
		`{"worker_id":"","types":["a"],"lease_seconds":1e10}`,
		`{"worker_id":"w","types":["a"],"max":100,"lease_seconds":0.000001}`,
		`{"WORKER_ID":"w","Types":["a"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Bounded: a long-poll lease must not stall the fuzzer.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		for range 2 {
			if rec := e.serve(context.Background(), "POST", "/v1/tasks", []byte(`{"type":"a"}`)); rec.Code != http.StatusCreated {
				t.Fatalf("enqueue: %d %s", rec.Code, rec.Body.Bytes())
			}
		}
		before := e.clock.Now()
		rec := e.serve(ctx, "POST", "/v1/leases", body)
		after := e.clock.Now()
		what := fmt.Sprintf("POST /v1/leases %q", body)
		if rec.Code == http.StatusServiceUnavailable && ctx.Err() != nil {
			return // the fuzzer's own deadline, on a loaded machine
		}
		if !fuzzAnswered(t, what, rec) {
			return
		}
		var in struct {
			Types        []string `json:"types"`
			Max          int      `json:"max"`
			LeaseSeconds *float64 `json:"lease_seconds"`
		}
		var out struct {
			Tasks []struct {
				Type    string    `json:"type"`
				Expires time.Time `json:"lease_expires_at"`
			} `json:"tasks"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("%s answered 200, but encoding/json refuses the body: %v", what, err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: answer %s: %v", what, rec.Body.Bytes(), err)
		}
		if len(out.Tasks) > max(in.Max, 1) {
			t.Fatalf("%s: %d tasks leased", what, len(out.Tasks))
		}
		for _, task := range out.Tasks {
			if !slices.Contains(in.Types, task.Type) {
				t.Fatalf("%s: leased a task of type %q", what, task.Type)
			}
			if in.LeaseSeconds != nil && *in.LeaseSeconds > 0 {
				d := time.Duration(math.Round(*in.LeaseSeconds * 1e9))
				if task.Expires.Before(before.Add(d-time.Microsecond)) || task.Expires.After(after.Add(d)) {
					t.Fatalf("%s: lease expires at %v, asked for %v from %v", what, task.Expires, d, before)
				}
			}
		}
	})
}

// FuzzFailBody reports a failure with an arbitrary body ("LEASE" in it
// becomes the lease) on a fresh lease each time. No body makes a 5xx, and
// a report the API takes is the one recorded: the task's last error has
// the code and message sent, and the decision follows the report (dead
// for a non-retryable error, a retry after at least the Retry-After, up to
// the policy's cap, for a retryable one, on the first attempt).
func FuzzFailBody(f *testing.F) {
	e := newEnv(f, envOpts{sync: "OFF"})
	for _, s := range []string{
		`{"lease_id":"LEASE","error":{"code":"503","message":"m","retryable":true,"retry_after_seconds":2}}`,
		`{"lease_id":"LEASE","error":{"code":"400","message":"m"}}`,
		`{"lease_id":"LEASE","error":{"code":"x","message":"m","retryable":false,"retry_after_seconds":1e-7}}`,
		`{"lease_id":"LEASE","error":{"message":"\u00e9\t\u001b[31m","retry_after_seconds":1e9}}`,
		`{"lease_id":"LEASE","error":null}`,
		`{"lease_id":"x.y","error":{"message":"m"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		serve := func(method, path string, body []byte) *httptest.ResponseRecorder {
			return e.serve(ctx, method, path, body)
		}
		id, lease, _ := e.freshLease(t)
		body := bytes.ReplaceAll(raw, []byte("LEASE"), []byte(lease))
		rec := serve("POST", "/v1/tasks/"+id+"/fail", body)
		what := fmt.Sprintf("POST /v1/tasks/%s/fail %q", id, body)
		if !fuzzAnswered(t, what, rec) {
			return
		}
		var in struct {
			Error struct {
				Code              string   `json:"code"`
				Message           string   `json:"message"`
				Retryable         *bool    `json:"retryable"`
				RetryAfterSeconds *float64 `json:"retry_after_seconds"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("%s answered 200, but encoding/json refuses the body: %v", what, err)
		}
		var out struct {
			State        store.State `json:"state"`
			DelaySeconds *float64    `json:"delay_seconds"`
			DeadReason   string      `json:"dead_reason"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: answer %s: %v", what, rec.Body.Bytes(), err)
		}
		retryable, cap := in.Error.Retryable, retry.DefaultMaxDelay
		switch {
		case retryable != nil && !*retryable:
			if out.State != store.StateDead || out.DeadReason != store.DeadNonRetryable {
				t.Fatalf("%s: a non-retryable error answered %s", what, rec.Body.Bytes())
			}
		case retryable != nil && *retryable:
			if out.State != store.StateRetryWaiting || out.DelaySeconds == nil || *out.DelaySeconds < 0 || *out.DelaySeconds > cap.Seconds() {
				t.Fatalf("%s: a retryable error on the first attempt answered %s", what, rec.Body.Bytes())
			}
			if ra := in.Error.RetryAfterSeconds; ra != nil && *ra > 0 {
				want := min(time.Duration(math.Round(*ra*1e9)), cap)
				if got := time.Duration(math.Round(*out.DelaySeconds * 1e9)); got < want-time.Microsecond || got > want+time.Microsecond {
					t.Fatalf("%s: Retry-After %gs (cap %v) answered %s", what, *ra, cap, rec.Body.Bytes())
				}
			}
		}
		answer := rec.Body.Bytes()
		rec = serve("GET", "/v1/tasks/"+id, nil)
		var task struct {
			State     store.State     `json:"state"`
			LastError store.ErrorInfo `json:"last_error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &task); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("GET the task: %d %s", rec.Code, rec.Body.Bytes())
		}
		if task.State != out.State || task.LastError.Code != in.Error.Code || task.LastError.Message != in.Error.Message {
			t.Fatalf("%s answered %s but the task is %s", what, answer, rec.Body.Bytes())
		}
	})
}

// fuzzAnswered fails t on a 5xx answer to what, checks a refusal's body
// (checkRefusal), and reports whether the API took the request (200).
func fuzzAnswered(t *testing.T, what string, rec *httptest.ResponseRecorder) bool {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body.Bytes())
	}
	checkRefusal(t, what, rec)
	return rec.Code == http.StatusOK
}

// serve sends a JSON body (or none) through the handler.
func (e *env) serve(ctx context.Context, method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec
}

// fuzzLeaseSeq names a task type per fresh lease.
var fuzzLeaseSeq atomic.Int64

// freshLease enqueues a task of a type of its own and leases it for an
// hour, so that each fuzz input acts on a lease no other input touched.
func (e *env) freshLease(t testing.TB) (id, lease string, expires time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ := fmt.Sprintf("fuzz%d", fuzzLeaseSeq.Add(1))
	if rec := e.serve(ctx, "POST", "/v1/tasks", []byte(`{"type":"`+typ+`"}`)); rec.Code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", rec.Code, rec.Body.Bytes())
	}
	rec := e.serve(ctx, "POST", "/v1/leases", []byte(`{"worker_id":"w","types":["`+typ+`"],"lease_seconds":3600}`))
	var leased struct {
		Tasks []struct {
			ID      string    `json:"id"`
			LeaseID string    `json:"lease_id"`
			Expires time.Time `json:"lease_expires_at"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &leased); err != nil || len(leased.Tasks) != 1 {
		t.Fatalf("lease: %d %s", rec.Code, rec.Body.Bytes())
	}
	return leased.Tasks[0].ID, leased.Tasks[0].LeaseID, leased.Tasks[0].Expires
}
