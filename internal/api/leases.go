package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// leaseBody is the body of POST /v1/leases.
type leaseBody struct {
	WorkerID     text     `json:"worker_id"`
	Types        []string `json:"types"`
	Max          int      `json:"max"`
	WaitSeconds  *float64 `json:"wait_seconds"`
	LeaseSeconds *float64 `json:"lease_seconds"`
}

// leasedTaskJSON is a task handed to a pull worker.
type leasedTaskJSON struct {
	ID             string   `json:"id"`
	Type           string   `json:"type"`
	RawPayload     rawJSON  `json:"payload"`
	Attempt        int      `json:"attempt"`
	LeaseID        string   `json:"lease_id"`
	LeaseExpiresAt jsonTime `json:"lease_expires_at"`
}

// rawJSON is raw JSON text that marshals as itself (null when empty).
type rawJSON []byte

// MarshalJSON implements json.Marshaler.
func (r rawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// lease handles POST /v1/leases: leases up to max due tasks of the given
// types, long-polling up to wait_seconds when none is due. A request that
// arrives once the node began to shut down is answered 503 (one already
// waiting then answers no tasks).
func (s *server) lease(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b leaseBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	req := engine.LeaseRequest{WorkerID: string(b.WorkerID), Types: b.Types, Max: b.Max}
	var err error
	if req.Wait, err = optSeconds("wait_seconds", b.WaitSeconds, engine.MaxLeaseWait); err != nil {
		return err
	}
	if req.LeaseDuration, err = optSeconds("lease_seconds", b.LeaseSeconds, engine.MaxLeaseDuration); err != nil {
		return err
	}
	stopping := s.e.ShuttingDown()
	ts, err := s.e.Lease(r.Context(), req)
	if err != nil {
		return err
	}
	if stopping && len(ts) == 0 {
		// Answered {"tasks": []} at once (Lease, the request checked), a
		// worker would ask again at once, for as long as the stopping
		// node takes the reports of its leases.
		return errLeaseStopping
	}
	out := make([]leasedTaskJSON, len(ts))
	for i := range ts {
		t := &ts[i]
		out[i] = leasedTaskJSON{ID: t.ID, Type: t.Type, RawPayload: rawJSON(t.Payload), Attempt: t.Attempt,
			LeaseID: engine.LeaseToken(t), LeaseExpiresAt: jsonTime(t.LeaseExpiresAt)}
	}
	if len(ts) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
		return nil
	}
	// Tasks leased for an answer that cannot reach the worker would wait,
	// leased to no one, until their leases expire: give them back at once
	// when the client is known to be gone before the answer is written
	// (its connection closed, its request timed out), or the answer fails
	// to leave. An answer that left whole may still be lost on the way;
	// the server cannot know, and its leases expire.
	if err := r.Context().Err(); err != nil {
		s.e.ReleaseLeased(ts)
		return fmt.Errorf("answer lease: %w", err)
	}
	if err := deliverJSON(w, http.StatusOK, map[string]any{"tasks": out}); err != nil {
		s.e.ReleaseLeased(ts)
		s.log.Debug("api: lease answer not delivered; tasks released", "request_id", requestIDFrom(r.Context()),
			"tasks", len(ts), "err", err)
	}
	return nil
}

// heartbeatBody is the (optional) body of a lease heartbeat.
type heartbeatBody struct {
	LeaseSeconds *float64 `json:"lease_seconds"`
}

// heartbeat handles POST /v1/leases/{lease_id}/heartbeat.
func (s *server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b heartbeatBody
	if err := s.readBody(w, r, &b, true); err != nil {
		return err
	}
	d, err := optSeconds("lease_seconds", b.LeaseSeconds, engine.MaxLeaseDuration)
	if err != nil {
		return err
	}
	exp, err := s.e.Heartbeat(r.Context(), r.PathValue("lease_id"), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"lease_expires_at": jsonTime(exp)})
	return nil
}

// completeBody is the body of POST /v1/tasks/{id}/complete.
type completeBody struct {
	LeaseID text `json:"lease_id"`
}

// completeTask handles POST /v1/tasks/{id}/complete.
func (s *server) completeTask(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var b completeBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	if b.LeaseID == "" {
		return fieldError("lease_id", "is required")
	}
	if err := s.e.Complete(r.Context(), id, string(b.LeaseID)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return taskNotFound(id)
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": store.StateSucceeded})
	return nil
}

// failBody is the body of POST /v1/tasks/{id}/fail.
type failBody struct {
	LeaseID text            `json:"lease_id"`
	Error   json.RawMessage `json:"error"` // a reportedError, decoded apart so errors name "error.<field>"
}

// reportedError is the "error" member of a fail body.
type reportedError struct {
	Code              text     `json:"code"`
	Message           text     `json:"message"`
	Retryable         *bool    `json:"retryable"`
	RetryAfterSeconds *float64 `json:"retry_after_seconds"`
}

// failResponse is the engine's retry decision.
type failResponse struct {
	State        store.State `json:"state"`
	NextRunAt    *jsonTime   `json:"next_run_at,omitempty"`
	DelaySeconds *float64    `json:"delay_seconds,omitempty"`
	DeadReason   string      `json:"dead_reason,omitempty"`
}

// failTask handles POST /v1/tasks/{id}/fail: records the failed attempt and
// returns the retry decision.
func (s *server) failTask(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var b failBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	if b.LeaseID == "" {
		return fieldError("lease_id", "is required")
	}
	if isNull(b.Error) {
		return fieldError("error", "is required")
	}
	var re reportedError
	if err := decodeJSON(b.Error, &re, "error."); err != nil {
		return err
	}
	rep := engine.ReportedError{Code: string(re.Code), Message: string(re.Message), Retryable: re.Retryable}
	if rep.RetryAfter, err = optSeconds("error.retry_after_seconds", re.RetryAfterSeconds, maxDelay); err != nil {
		return err
	}
	out, err := s.e.Fail(r.Context(), id, string(b.LeaseID), rep)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return taskNotFound(id)
		}
		return err
	}
	resp := failResponse{State: out.State, DeadReason: out.DeadReason}
	if out.State == store.StateRetryWaiting || out.State == store.StatePending {
		at, d := jsonTime(out.RunAt), durSeconds(out.LastDelay)
		resp.NextRunAt, resp.DelaySeconds = &at, &d
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
