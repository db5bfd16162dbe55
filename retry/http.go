package retry

import (
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBodySnippet is how much of a failed response's body FromResponse keeps.
const maxBodySnippet = 1 << 10

// HTTPError is a failed HTTP response. [Classify] treats 429, 408, 425 and
// 5xx except 501 as transient and every other status as permanent, with the
// status as the code ("503"); RetryAfter is honored, capped by the policy's
// MaxDelay.
type HTTPError struct {
	StatusCode int           // the response status
	RetryAfter time.Duration // parsed Retry-After header; 0 if none
	Body       string        // at most the first 1 KiB of the body
}

// Error returns "http status 503 Service Unavailable".
func (e *HTTPError) Error() string {
	s := "http status " + strconv.Itoa(e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		s += " " + t
	}
	return s
}

// Class returns the retry class of the status. 425 Too Early is
// transient: the server declined a request it might see again and asks
// for it later (RFC 8470), not a request that can never succeed.
func (e *HTTPError) Class() Class {
	switch c := e.StatusCode; {
	case c == http.StatusTooManyRequests, c == http.StatusRequestTimeout, c == http.StatusTooEarly:
		return ClassTransient
	case c >= 500 && c <= 599 && c != http.StatusNotImplemented:
		return ClassTransient
	default:
		return ClassPermanent
	}
}

// FromResponse returns nil for a 2xx or 3xx response (and for a nil
// response) and otherwise an [*HTTPError] with the Retry-After header
// parsed relative to now and the first 1 KiB of the body. It reads from the
// body but does not close it; that stays the caller's job.
func FromResponse(resp *http.Response, now time.Time) error {
	if resp == nil || (resp.StatusCode >= 200 && resp.StatusCode <= 399) {
		return nil
	}
	e := &HTTPError{StatusCode: resp.StatusCode}
	if v := resp.Header.Get("Retry-After"); v != "" {
		e.RetryAfter, _ = ParseRetryAfter(v, now)
	}
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodySnippet))
		e.Body = string(b)
	}
	return e
}

// ParseRetryAfter parses a Retry-After header value: delta-seconds ("120")
// or an HTTP-date in any of the three formats of http.ParseTime, taken
// relative to now. A date in the past gives (0, true). A wait longer than
// time.Duration can hold (delta-seconds past about 292 years, or a date
// that far ahead) gives the longest Duration and true: it asks for more
// than any shorter value, and a policy caps it at MaxDelay. Anything else
// (garbage, negative numbers, fractions) gives (0, false).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(math.MaxInt64/int64(time.Second)) {
			// Only ErrRange is possible for digits: saturate.
			return math.MaxInt64, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	return t.Sub(now), true // saturates at the longest Duration
}
