package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// writeJSON sends v with the given status. HTML characters are not
// escaped: answers are application/json with nosniff, and a task's payload
// must come back byte for byte as stored (compacted), as push delivery
// sends it, not with its <, > and & rewritten as \u003c and so on.
//
// Only the API's own types are encoded, so an encoding error is a fault
// (a stored payload that is not JSON, in a damaged database): writeJSON
// panics with it before writing anything, and the recovery in ServeHTTP
// logs it and answers 500 with the request id.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body := jsonAnswer(w, v)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// deliverJSON writes v as a JSON answer whose length is declared and sends
// it to the connection before returning. An error means the client did
// not receive the answer whole: its connection failed (reset, closed, or
// not read for the write timeout) before the last byte was handed to it.
// A writer that cannot flush (a test recorder) keeps the answer as it is.
func deliverJSON(w http.ResponseWriter, status int, v any) error {
	body := jsonAnswer(w, v)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if _, err := w.Write(body); err != nil {
		return fmt.Errorf("write answer: %w", err)
	}
	if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("send answer: %w", err)
	}
	return nil
}

// jsonAnswer encodes v as an answer's body and sets the answer's JSON
// headers.
func jsonAnswer(w http.ResponseWriter, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the value with '\n'
		panic(fmt.Errorf("encode response: %w", err))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	return buf.Bytes()
}

// readBody reads and decodes the JSON request body into dst, rejecting
// oversized bodies (413), bodies that are not application/json (415),
// malformed JSON, unknown fields, trailing data and member names given
// twice in one object outside task payloads (400; see strict.go). When optional is
// true an empty body is accepted and leaves dst unchanged; otherwise it is
// a 400.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, dst any, optional bool) error {
	tooLarge := &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge,
		Message: fmt.Sprintf("request body is larger than %d bytes", s.maxBody)}
	if r.ContentLength > s.maxBody {
		return tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return &apiError{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout,
				Message: fmt.Sprintf("the request body did not arrive within %s", s.bodyTimeout)}
		}
		return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "could not read the request body"}
	}
	if len(bytes.Trim(body, jsonSpace)) == 0 {
		if optional {
			return nil
		}
		return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "a JSON request body is required"}
	}
	if err := checkContentType(r); err != nil {
		return err
	}
	if err := checkContentEncoding(r); err != nil {
		return err
	}
	if err := decodeJSON(body, dst, ""); err != nil {
		return err
	}
	if where, name, dup := duplicateMember(body); dup {
		field := truncate(name, maxEcho)
		if where != "" {
			field = where + "." + name
		}
		return fieldError(field, "is given more than once (member names are compared without regard to case, as the decoder matches them)")
	}
	return nil
}

// jsonSpace is JSON's white space (RFC 8259): a body of only these is
// empty. Other characters that are space to Unicode (a form feed, a no-break
// space) are not JSON, and a body of them is malformed, not empty (which
// for redrive and purge would select every dead task).
const jsonSpace = " \t\r\n"

// checkContentType requires application/json (parameters such as charset
// are allowed, as is the +json suffix).
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &apiError{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
		Message: fmt.Sprintf("request bodies must be application/json (got Content-Type %s)", ct)}
}

// checkContentEncoding refuses a body sent with a content coding (gzip,
// say): the server does not decode one, and the coded bytes would be
// refused as malformed JSON, which misleads (RFC 9110 answers 415).
func checkContentEncoding(r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return &apiError{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
					Message: fmt.Sprintf("request bodies must not be encoded (got Content-Encoding %s)", truncate(c, maxEcho))}
			}
		}
	}
	return nil
}

// decodeJSON strictly decodes one JSON value from data into dst. Field
// names in errors are prefixed with prefix (e.g. "tasks[3].").
func decodeJSON(data []byte, dst any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, prefix)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON,
			Message: "malformed JSON: unexpected data after the JSON value" + at(prefix)}
	}
	return nil
}

func at(prefix string) string {
	if prefix == "" {
		return ""
	}
	return " (in " + strings.TrimSuffix(prefix, ".") + ")"
}

// jsonError turns encoding/json errors into 400s naming the JSON field.
func jsonError(err error, prefix string) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var ie *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &ie):
		return fmt.Errorf("decode request: %w", err) // a bug: 500
	case errors.As(err, &se):
		return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON,
			Message: fmt.Sprintf("malformed JSON at byte %d: %s%s", se.Offset, strings.TrimPrefix(se.Error(), "json: "), at(prefix))}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "malformed JSON: unexpected end of input" + at(prefix)}
	case errors.As(err, &te):
		if te.Field == "" {
			if prefix == "" {
				return fieldError("", "the request body must be a JSON object (got %s)", te.Value)
			}
			return fieldError(strings.TrimSuffix(prefix, "."), "must be a JSON object (got %s)", te.Value)
		}
		return fieldError(prefix+te.Field, "must be %s (got %s)", kindName(te), truncate(te.Value, maxEcho))
	}
	if rest, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, uerr := strconv.Unquote(rest)
		if uerr != nil {
			name = strings.Trim(rest, `"`)
		}
		if name == "" {
			// A field named "" would be a message naming nothing.
			if prefix == "" {
				return fieldError("", "the request body has a member with an empty name")
			}
			return fieldError(strings.TrimSuffix(prefix, "."), "has a member with an empty name")
		}
		return fieldError(prefix+truncate(name, maxEcho), "unknown field")
	}
	return &apiError{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ") + at(prefix)}
}

func kindName(te *json.UnmarshalTypeError) string {
	if te.Type == nil {
		return "a valid value"
	}
	if te.Type == textType {
		return "a string of valid Unicode text"
	}
	switch s := te.Type.String(); {
	case s == "string":
		return "a string"
	case s == "bool":
		return "a boolean"
	case strings.HasPrefix(s, "int") || strings.HasPrefix(s, "uint"):
		return "an integer in range"
	case strings.HasPrefix(s, "float"):
		return "a number"
	case strings.HasPrefix(s, "[]") && s != "[]uint8":
		return "an array"
	case strings.HasPrefix(s, "map[") || strings.HasPrefix(s, "struct") || strings.Contains(s, "."):
		return "an object"
	}
	return "a " + te.Type.Kind().String()
}

// MaxDelay bounds the API's durations that put work off or select it by
// age: delay_seconds, error.retry_after_seconds and older_than_seconds.
// A positive value under a microsecond is refused too (see seconds).
const MaxDelay = 10 * 365 * 24 * time.Hour

// maxDelay is MaxDelay, for the handlers.
const maxDelay = MaxDelay

// seconds converts a number of seconds in [0, max] into a Duration.
func seconds(field string, v float64, max time.Duration) (time.Duration, error) {
	if math.IsNaN(v) || v < 0 || v > max.Seconds() {
		return 0, fieldError(field, "must be between 0 and %s seconds (got %g)", strconv.FormatFloat(max.Seconds(), 'f', -1, 64), v)
	}
	d := time.Duration(math.Round(v * 1e9))
	if v > 0 && d < time.Microsecond {
		// 0 often means "the default": a positive value must not become it.
		return 0, fieldError(field, "must be 0 or at least 0.000001 seconds (got %g)", v)
	}
	return d, nil
}

// optSeconds is seconds for an optional field (nil = 0).
func optSeconds(field string, v *float64, max time.Duration) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	return seconds(field, *v, max)
}

// durSeconds writes a duration as (possibly fractional) seconds.
func durSeconds(d time.Duration) float64 { return d.Seconds() }

// parseTime reads an RFC 3339 timestamp. Its instant must lie within the
// years 0001 to 9999 in UTC, where the API writes times back: an offset can
// carry "0000-01-01T00:00:00+01:00" out of that range, and the answer would
// then hold a time no RFC 3339 parser reads.
func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fieldError(field, "must be an RFC 3339 time such as 2024-05-01T12:00:00Z (got %q)", truncate(s, 64))
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return time.Time{}, fieldError(field, "must lie between years 0001 and 9999 in UTC (got %q)", truncate(s, 64))
	}
	return t, nil
}

// maxEcho bounds the bytes of a path, method, name or number an error
// answer quotes from the request: quoted whole, a long one made a large
// answer (escaped, '<' and '&' take six bytes each), even for a client
// without a token.
const maxEcho = 128

// truncate cuts s to at most n bytes, at a character boundary, marking a
// cut with an ellipsis.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// jsonTime is a timestamp in JSON: RFC 3339 in UTC with fractional seconds,
// or null when zero.
type jsonTime time.Time

// MarshalJSON implements json.Marshaler.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	tt := time.Time(t)
	if tt.IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + tt.UTC().Format(time.RFC3339Nano) + `"`), nil
}

// isNull reports whether raw JSON is absent or the literal null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
