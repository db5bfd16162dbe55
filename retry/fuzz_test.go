package retry

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var fuzzNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"0", "120", " 5 ", "-1", "1.5", "", "abc", "99999999999999999999", "9223372036",
		"Sun, 01 Jun 2025 12:00:30 GMT", "Sunday, 01-Jun-25 12:00:30 GMT", "Sun Jun  1 12:00:30 2025",
		"Sat, 31 May 2025 12:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, fuzzNow)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", v, d, ok)
		}
		trimmed := strings.TrimSpace(v)
		if allDigits(trimmed) {
			// Every number of seconds is a valid wait; those beyond
			// Duration's range saturate.
			n, err := strconv.ParseInt(trimmed, 10, 64)
			want := time.Duration(math.MaxInt64)
			if err == nil && n <= int64(math.MaxInt64)/int64(time.Second) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, true", v, d, ok, want)
			}
			return
		}
		if ok && d > 0 {
			at, err := http.ParseTime(trimmed)
			if err != nil || at.Sub(fuzzNow) != d {
				t.Fatalf("ParseRetryAfter(%q) = %v but the date is %v (%v)", v, d, at, err)
			}
		}
	})
}

func FuzzPolicyJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"backoff":"linear","initial_delay_seconds":0.2}`,
		`{"backoff":"exponential","initial_delay_seconds":1,"multiplier":2,"max_delay_seconds":300,"max_doublings":0,"jitter":"proportional","jitter_fraction":0.25,"max_attempts":5,"retry_window_seconds":0,"retry_on":["ETIMEDOUT","503"],"no_retry_on":["400","invalid_format"]}`,
		`{"backoff":"decorrelated","max_delay_seconds":9223372036.854775807,"retry_window_seconds":1e-9}`,
		`{"initial_delay_seconds":-0.5e1,"retry_on":[]}`, `{"x":1}`, `{"max_attempts":1e3}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Policy
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", p, err)
		}
		var back Policy
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if !reflect.DeepEqual(p, back) {
			t.Fatalf("round trip changed the policy:\n%+v\n%s\n%+v", p, out, back)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, out) {
			t.Fatalf("encoding is not stable: %s vs %s", out, again)
		}
		if p.Validate() != nil {
			return
		}
		q := p.WithDefaults()
		r := rand.New(rand.NewPCG(1, 2))
		prev := time.Duration(0)
		for n := 1; n <= 12; n++ {
			d := q.Decide(Input{Attempt: n, MaxAttempts: 100, Now: fuzzNow, PrevDelay: prev, Class: ClassTransient}, r)
			if d.Delay < 0 || d.Delay > q.MaxDelay {
				t.Fatalf("%s: attempt %d: delay %v outside [0, %v]", data, n, d.Delay, q.MaxDelay)
			}
			prev = d.Delay
		}
	})
}
