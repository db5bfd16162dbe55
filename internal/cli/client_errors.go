package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file turns the API's error answers and transport failures into
// errors whose messages fit on one line (see client.go).

// apiCallError is an error answer of the API.
type apiCallError struct {
	Status    int
	Code      string
	Message   string
	Field     string
	RequestID string
	// RetryAfter is the answer's Retry-After in seconds (a 503's or a
	// 429's), 0 when it has none.
	RetryAfter time.Duration
	// Foreign is set when the answer is not the API's error body (a
	// proxy's page, say): its 403 says nothing about the token.
	Foreign bool
}

func (e *apiCallError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	fmt.Fprintf(&b, " (HTTP %d %s", e.Status, e.Code)
	if e.RequestID != "" {
		fmt.Fprintf(&b, ", request id %s", e.RequestID)
	}
	b.WriteString(")")
	switch e.Status {
	case http.StatusUnauthorized:
		b.WriteString("; pass --token or set RETRYQ_API_TOKEN")
	case http.StatusForbidden:
		if !e.Foreign {
			// The API's message already says the token is read-only.
			b.WriteString("; pass a full-access token with --token or RETRYQ_API_TOKEN")
		}
	}
	return b.String()
}

// decodeAPIError reads the API's error body, or describes a foreign answer
// (a proxy's HTML page, say) by its status and first line.
func decodeAPIError(resp *http.Response, data []byte) error {
	var body struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Field     string `json:"field"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	e := &apiCallError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"),
		RetryAfter: retryAfterSeconds(resp.Header.Get("Retry-After"))}
	if json.Unmarshal(data, &body) == nil && body.Error.Message != "" {
		// Server data, printed on the terminal as one line: escape
		// sequences and line breaks are dropped, as from a table's cells.
		e.Code, e.Message, e.Field = cleanCell(body.Error.Code, 0), cleanCell(body.Error.Message, 0), body.Error.Field
		if body.Error.RequestID != "" {
			e.RequestID = body.Error.RequestID
		}
		e.RequestID = cleanCell(e.RequestID, 0)
		if e.Status < 500 {
			e.RequestID = "" // only server faults need it to find the log line
		}
		return e
	}
	e.Foreign = true
	e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	if e.Code == "" {
		e.Code = "error"
	}
	first := strings.TrimSpace(string(data))
	if i := strings.IndexByte(first, '\n'); i >= 0 {
		first = strings.TrimSpace(first[:i])
	}
	first = cleanCell(first, 120)
	if title, ok := htmlTitle(data); ok {
		// A proxy's or web server's page: its first line is markup.
		first = "an HTML page"
		if title != "" {
			first += " titled " + strconv.Quote(cleanCell(title, 120))
		}
		first += ", not a retryq API answer"
	}
	if first == "" {
		first = "no error details"
	}
	// The status line's reason phrase is the server's text too.
	e.Message = "the server answered " + cleanCell(resp.Status, 120) + ": " + first
	e.RequestID = cleanCell(e.RequestID, 0)
	if e.Status < 500 {
		e.RequestID = ""
	}
	return e
}

// maxRetryAfter bounds the pause a Retry-After header can ask for.
const maxRetryAfter = time.Minute

// retryAfterSeconds reads a Retry-After header of whole seconds (the form
// the API sends), at most maxRetryAfter; 0 when there is none or it is
// not a number of seconds.
func retryAfterSeconds(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, int(maxRetryAfter/time.Second))) * time.Second
}

// htmlTitle reports whether data is an HTML page and returns its title
// (whitespace collapsed), or "" when it has none.
func htmlTitle(data []byte) (string, bool) {
	page := bytes.TrimSpace(data[:min(len(data), 64<<10)])
	// Lower-cased byte by byte (ASCII only), so offsets match page.
	lower := bytes.Clone(page)
	for i, c := range lower {
		if 'A' <= c && c <= 'Z' {
			lower[i] = c + 'a' - 'A'
		}
	}
	if !bytes.HasPrefix(lower, []byte("<!doctype html")) && !bytes.HasPrefix(lower, []byte("<html")) &&
		!bytes.HasPrefix(lower, []byte("<head")) {
		return "", false
	}
	i := bytes.Index(lower, []byte("<title"))
	if i < 0 {
		return "", true
	}
	start := bytes.IndexByte(lower[i:], '>')
	if start < 0 {
		return "", true
	}
	start += i + 1
	end := bytes.Index(lower[start:], []byte("</title"))
	if end < 0 {
		return "", true
	}
	return strings.Join(strings.Fields(string(page[start:start+end])), " "), true
}

// isAPIError reports whether err is an API error answer with the given
// status (and code, when not empty).
func isAPIError(err error, status int, code string) bool {
	var ae *apiCallError
	return errors.As(err, &ae) && ae.Status == status && (code == "" || ae.Code == code)
}

// unreachableError is a request that got no HTTP answer.
type unreachableError struct {
	server string
	err    error
}

func (e *unreachableError) Unwrap() error { return e.err }

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the retryq server at %s: %s (is `retryq server` running? set --server or RETRYQ_SERVER)",
		e.server, describeNetError(e.err))
}

// describeNetError says in a few words why a request got no answer.
func describeNetError(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the connection was closed before an answer"
	case errors.As(err, &dnsErr):
		return "unknown host " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer within %v", requestTimeout)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
