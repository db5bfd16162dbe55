package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// query holds a request's validated query parameters.
type query map[string]string

// parseQuery parses the query string, rejecting malformed encodings,
// parameters not in allowed and parameters given more than once.
func parseQuery(r *http.Request, allowed ...string) (query, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fieldError("", "malformed query string: %v", err)
	}
	q := make(query, len(vals))
	for k, vs := range vals {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			k = truncate(k, maxEcho) // quoted twice (field and message)
			if k == "" {
				// A parameter named "" would be a message naming nothing.
				return nil, fieldError("", "malformed query string: a parameter without a name")
			}
			if len(allowed) == 0 {
				return nil, fieldError(k, "unknown query parameter (this route takes none)")
			}
			return nil, fieldError(k, "unknown query parameter (allowed: %s)", strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return nil, fieldError(k, "given more than once")
		}
		q[k] = vs[0]
	}
	return q, nil
}

// limit reads "limit": 1..engine.MaxListLimit, default 100.
func (q query) limit() (int, error) {
	v, ok := q["limit"]
	if !ok {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > engine.MaxListLimit {
		return 0, fieldError("limit", "must be an integer between 1 and %d (got %q)", engine.MaxListLimit, truncate(v, 32))
	}
	return n, nil
}

// time reads an optional RFC 3339 parameter.
func (q query) time(name string) (time.Time, error) {
	v, ok := q[name]
	if !ok || v == "" {
		return time.Time{}, nil
	}
	return parseTime(name, v)
}

// cursor reads "cursor": an opaque token from a previous page.
func (q query) cursor() (string, error) {
	v := q["cursor"]
	if v != "" && !isTaskID(v) {
		return "", fieldError("cursor", "is not a cursor returned by this server")
	}
	return v, nil
}

// typ reads an optional task type filter.
func (q query) typ() (string, error) {
	v := q["type"]
	if v == "" {
		return "", nil
	}
	if err := engine.ValidateType("type", v); err != nil {
		return "", err
	}
	return v, nil
}

// states reads "state": a comma-separated list of state names.
func (q query) states() ([]store.State, error) {
	v := q["state"]
	if v == "" {
		return nil, nil
	}
	var out []store.State
	for _, part := range strings.Split(v, ",") {
		s := store.State(strings.TrimSpace(part))
		if !s.Valid() {
			return nil, fieldError("state", "unknown state %q (want a comma-separated list of %s)", truncate(string(s), 32), stateNames())
		}
		out = append(out, s)
	}
	return out, nil
}

func stateNames() string {
	names := make([]string, len(store.States))
	for i, s := range store.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// text reads an optional free-text filter of at most max bytes: Unicode
// text without NUL, as the same filter in a request body.
func (q query) text(name string, max int) (string, error) {
	v := q[name]
	if len(v) > max {
		return "", fieldError(name, "is longer than %d bytes", max)
	}
	if !store.ValidText(v) {
		return "", fieldError(name, "must be valid UTF-8 text without NUL bytes")
	}
	return v, nil
}

// boolean reads an optional "true" or "false" (default false).
func (q query) boolean(name string) (bool, error) {
	switch v := q[name]; v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, fieldError(name, "want true or false (got %q)", truncate(v, 32))
	}
}

// reason reads an optional dead reason.
func (q query) reason() (string, error) {
	return checkReason("reason", q["reason"])
}

func checkReason(field, v string) (string, error) {
	switch v {
	case "", store.DeadNonRetryable, store.DeadMaxAttempts, store.DeadRetryWindow:
		return v, nil
	}
	return "", fieldError(field, "unknown dead reason %q (want %s, %s or %s)", truncate(v, 32),
		store.DeadNonRetryable, store.DeadMaxAttempts, store.DeadRetryWindow)
}

// pathID reads and checks a task id path segment.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := engine.ValidateID(id); err != nil {
		return "", err
	}
	return id, nil
}

// notFound turns a store.ErrNotFound for a task into a 404 naming it.
func taskNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("task %s not found", id)}
}

// isTaskID reports whether v has the form of the ids this server makes
// (engine.NewID: 26 characters of Crockford base32); every cursor is one.
func isTaskID(v string) bool {
	if len(v) != 26 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !strings.ContainsRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", rune(v[i])) {
			return false
		}
	}
	return true
}
