package retry

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", math.MaxInt64, true}, // beyond Duration: the longest
		{"99999999999999999999999", math.MaxInt64, true},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"+5", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{"Sun, 01 Jun 2025 12:00:30 GMT", 30 * time.Second, true}, // RFC 1123
		{"Sunday, 01-Jun-25 12:01:00 GMT", time.Minute, true},     // RFC 850
		{"Sun Jun  1 12:00:05 2025", 5 * time.Second, true},       // ANSI C asctime
		{"Sat, 31 May 2025 12:00:00 GMT", 0, true},                // past
		{"Sun, 01 Jun 2025 12:00:00 GMT", 0, true},                // now
		{"Fri, 31 Dec 9999 23:59:59 GMT", math.MaxInt64, true},    // beyond Duration: the longest
		{"Sun, 01 Jun 2025 12:00:30 PST", 0, false},               // not GMT
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestFromResponse(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	resp := func(status int, retryAfter, body string) *http.Response {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
	}
	for _, status := range []int{200, 204, 301, 399} {
		if err := FromResponse(resp(status, "", ""), now); err != nil {
			t.Errorf("status %d: %v", status, err)
		}
	}
	if FromResponse(nil, now) != nil {
		t.Error("nil response")
	}
	err := FromResponse(resp(503, "7", strings.Repeat("x", 5000)), now)
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 503 || he.RetryAfter != 7*time.Second || len(he.Body) != 1024 {
		t.Fatalf("FromResponse(503) = %#v", err)
	}
	if err.Error() != "http status 503 Service Unavailable" {
		t.Errorf("message %q", err.Error())
	}
	if err := FromResponse(resp(404, "garbage", "nope"), now); err.(*HTTPError).RetryAfter != 0 || err.(*HTTPError).Body != "nope" {
		t.Errorf("404: %#v", err)
	}
}

func TestFromResponseRealServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down")
	}))
	defer srv.Close()
	r, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	p := DefaultPolicy()
	class, code, ra := p.Classify(FromResponse(r, time.Now()))
	if class != ClassTransient || code != "429" || ra != 2*time.Second {
		t.Fatalf("got %v %q %v", class, code, ra)
	}
	d := p.Decide(Input{Attempt: 1, Now: time.Now(), Class: class, RetryAfter: ra}, nil)
	if !d.Retry || d.Delay != 2*time.Second {
		t.Fatalf("decision %+v", d)
	}
}

// A Retry-After longer than time.Duration can hold (delta-seconds past
// 292 years, or an HTTP-date that far ahead) asks for a longer wait than
// any other value, so it must be honored as the longest, capped at
// MaxDelay like every long Retry-After. It used to be dropped, so the next
// attempt came after the short backoff instead: the server was retried
// sooner the longer it asked to be left alone.
func TestRetryAfterBeyondDurationRangeWaitsMaxDelay(t *testing.T) {
	for _, v := range []string{"9223372037", "99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		r, err := srv.Client().Get(srv.URL)
		if err != nil {
			srv.Close()
			t.Fatal(err)
		}
		r.Body.Close()
		srv.Close()
		p := Policy{Backoff: BackoffFixed, InitialDelay: time.Second, MaxDelay: time.Hour, Jitter: JitterNone}
		now := time.Now()
		class, _, ra := p.Classify(FromResponse(r, now))
		d := p.Decide(Input{Attempt: 1, Now: now, Class: class, RetryAfter: ra}, nil)
		if !d.Retry || d.Delay != time.Hour {
			t.Errorf("Retry-After %q: decision %+v, want a retry after max_delay (1h)", v, d)
		}
	}
}
