package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// Error codes of the "code" member of error bodies.
const (
	CodeMalformedJSON        = "malformed_json"         // 400: the body is not valid JSON or has trailing data
	CodeInvalidField         = "invalid_field"          // 400: a field or query parameter is invalid ("field" names it)
	CodeUnauthorized         = "unauthorized"           // 401
	CodeForbidden            = "forbidden"              // 403
	CodeNotFound             = "not_found"              // 404: unknown id or route
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeConflict             = "conflict"               // 409: the task's state does not allow the operation
	CodeLeaseLost            = "lease_lost"             // 409: the lease expired or was superseded
	CodeRequestTimeout       = "request_timeout"        // 408: the request body did not arrive in time
	CodePayloadTooLarge      = "payload_too_large"      // 413
	CodeUnsupportedMediaType = "unsupported_media_type" // 415
	CodeInternal             = "internal"               // 500
	CodeUnavailable          = "unavailable"            // 503: database unavailable or server shutting down
	CodeNotReady             = "not_ready"              // 503 from /readyz
	CodeOverloaded           = "overloaded"             // 503: too many long polls wait on this node; ask again later
	CodeStorageFull          = "storage_full"           // 503: the database's disk, quota or file size limit is full
)

// msgStorageFull is the message of a 503 storage_full.
const msgStorageFull = "the database's storage is full (disk, quota or file size limit): writes are refused until space is freed; retry later"

// msgCorrupt is the message of a 503 for a database file found corrupt.
const msgCorrupt = "the database file is corrupt or not a database: restore it from a backup and restart the server (the server log names the file)"

// corruptMessage is the message of a 503 for err, a store.ErrCorrupt: a
// database server that reports damage names it by its SQLSTATE
// (PostgreSQL: XX001 data_corrupted, XX002 index_corrupted) and has no
// file of retryq's to restore; else the database file is corrupt (SQLite).
func corruptMessage(err error) string {
	var se interface{ SQLState() string }
	if !errors.As(err, &se) {
		return msgCorrupt
	}
	if se.SQLState() == "XX002" {
		return "the database reports a corrupted index (SQLSTATE XX002): check the database server's log; rebuilding the index (REINDEX) may repair it"
	}
	return "the database reports corrupted data (SQLSTATE " + se.SQLState() + "): check the database server's log; the damaged data may have to be restored from a backup"
}

// apiError is an error with its HTTP status and code.
type apiError struct {
	Status  int
	Code    string
	Message string
	Field   string // the offending field or query parameter, if any
}

func (e *apiError) Error() string { return e.Message }

var errInternal = &apiError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal server error"}

// errStopping answers /readyz once the node began to shut down, and
// errLeaseStopping a lease request that arrives then: the node still takes
// the reports of the leases it handed out, but hands out no more. Neither
// is a fault to log.
var (
	errStopping = &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady,
		Message: "not ready: this node is shutting down"}
	errLeaseStopping = &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
		Message: "this node is shutting down and leases no more tasks; ask another node, or again later"}
)

// fieldError is a 400 naming a field.
func fieldError(field, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidField, Message: msg, Field: field}
}

// policyError converts a retry policy error into a field error under prefix
// (e.g. "retry").
func policyError(prefix string, err error) *apiError {
	var fe *retry.FieldError
	if errors.As(err, &fe) {
		field := prefix
		if fe.Field != "" {
			field = prefix + "." + fe.Field
		}
		return fieldError(field, "%s", fe.Reason)
	}
	return fieldError(prefix, "%s", err.Error())
}

// errorBody is the JSON form of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// classify maps any handler error to the API error to send. internal is
// true for server faults that must be logged.
func classify(err error) (ae *apiError, internal bool) {
	var fe *engine.FieldError
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ae):
		return ae, ae.Status >= 500 && ae.Code != CodeNotReady && ae != errLeaseStopping
	case errors.As(err, &fe):
		return fieldError(fe.Field, "%s", fe.Message), false
	case errors.Is(err, retry.ErrInvalidPolicy):
		return policyError("retry", err), false
	case errors.Is(err, store.ErrLeaseLost):
		return &apiError{Status: http.StatusConflict, Code: CodeLeaseLost,
			Message: "lease lost: it expired, or the task was reaped, cancelled, finished or leased to another worker"}, false
	case errors.As(err, &ce):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Message: ce.Error()}, false
	case errors.Is(err, store.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}, false
	case errors.Is(err, store.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: err.Error()}, false
	case errors.Is(err, store.ErrInvalid):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidField, Message: err.Error()}, false
	case errors.Is(err, engine.ErrTooManyLongPolls):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeOverloaded, Message: err.Error() + "; ask again later"}, false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Usually the client went away; if not, the server is overloaded.
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "request cancelled or timed out"}, false
	case errors.Is(err, store.ErrDiskFull):
		// 503, not 507 Insufficient Storage: the condition is the
		// server's and passes once space is freed, like any other
		// unavailability, and clients and load balancers retry a 503
		// (after Retry-After) where they may give up on a 507.
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeStorageFull, Message: msgStorageFull}, true
	case errors.Is(err, store.ErrCorrupt):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: corruptMessage(err)}, true
	case errors.Is(err, store.ErrSchemaBroken):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the database schema is broken: a table or column retryq needs is missing (see the server log)"}, true
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrClosed), errors.Is(err, engine.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the database is unavailable or the server is shutting down; retry later"}, true
	}
	return errInternal, true
}

// writeError sends err as a JSON error response. Server faults are logged
// with the request id, which the body then carries.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae, internal := classify(err)
	id := requestIDFrom(r.Context())
	switch {
	case internal && (ae.Code == CodeUnavailable || ae.Code == CodeStorageFull):
		// Logged once per outage: every request fails alike until the
		// database is back (see dbOutages).
		s.outageFailed(r, ae, err)
	case internal:
		s.log.Error("api request failed", "request_id", id, "method", r.Method, "path", r.URL.Path,
			"status", ae.Status, "err", err)
	}
	reqID := ""
	if ae.Status >= 500 {
		reqID = id
	}
	writeAPIError(w, ae, reqID)
}

func writeAPIError(w http.ResponseWriter, ae *apiError, reqID string) {
	switch ae.Status {
	case http.StatusUnauthorized:
		v := `Bearer realm="retryq"`
		switch ae.Message {
		case "invalid bearer token":
			v += `, error="invalid_token"`
		case msgManyAuthorizations:
			v += `, error="invalid_request"`
		}
		w.Header().Set("WWW-Authenticate", v)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, ae.Status, errorBody{Error: errorDetail{Code: ae.Code, Message: ae.Message, Field: ae.Field, RequestID: reqID}})
}

type requestIDKey struct{}

// requestID returns the caller's X-Request-Id when it is a short token of
// safe characters, else a fresh random id.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); v != "" && len(v) <= 64 && safeID(v) {
		return v
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func safeID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
