package retry

import (
	"errors"
	"io"
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
		{"9223372037", 0, false},
		{"99999999999999999999999", 0, false},
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
		{"Fri, 31 Dec 9999 23:59:59 GMT", 0, false},               // beyond Duration
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
