package retry

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
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
		// Anything else is an HTTP date, read as net/http reads one: the
		// wait until it, or none for a date past.
		at, err := http.ParseTime(trimmed)
		switch {
		case err != nil:
			if ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, true, but it is neither seconds nor a date (%v)", v, d, err)
			}
		case !ok:
			t.Fatalf("ParseRetryAfter(%q) refused the date %v", v, at)
		case !at.After(fuzzNow) && d != 0, at.After(fuzzNow) && d != at.Sub(fuzzNow):
			t.Fatalf("ParseRetryAfter(%q) = %v but the date is %v", v, d, at)
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

// FuzzParseSeconds checks the exact decimal reading of JSON seconds
// against math/big: a JSON number is read as its value in nanoseconds
// rounded half away from zero, or refused as out of range exactly when
// that is beyond Duration; anything else is refused as not a number. And
// every Duration written by formatSeconds reads back as itself.
func FuzzParseSeconds(f *testing.F) {
	for _, s := range []string{
		"0", "-0", "1", "0.2", "-1.5", "1.5e2", "1E-9", "0.0000000005", "-0.0000000005", "0.00000000049",
		"9223372036.854775807", "9223372036.8547758075", "-9223372036.854775808", "-9223372036.8547758085",
		"1e10", "1e-1000000000000000", "01", "1.", ".5", "+1", "1e", "--1", "1e+1", "NaN", "",
	} {
		f.Add(s, int64(0))
	}
	f.Add("", int64(math.MinInt64))
	f.Add("", int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, s string, ns int64) {
		if back, err := parseSeconds(formatSeconds(time.Duration(ns))); err != nil || back != time.Duration(ns) {
			t.Fatalf("%d written as %q reads back as %d, %v", ns, formatSeconds(time.Duration(ns)), back, err)
		}
		if len(s) > 64 {
			return // math/big would take long on huge exponents
		}
		d, err := parseSeconds(s)
		var num json.Number
		isNumber := json.Unmarshal([]byte(s), &num) == nil && string(num) == s
		if !isNumber {
			if err == nil {
				t.Fatalf("parseSeconds(%q) = %v, but it is not a JSON number", s, d)
			}
			return
		}
		mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
		if e, perr := strconv.ParseInt(exp, 10, 64); exp != "" && (perr != nil || e > 40 || e < -40) {
			return // an exponent math/big cannot take quickly; the unit tests cover these
		}
		r, ok := new(big.Rat).SetString(mant)
		if !ok {
			t.Fatalf("math/big cannot read %q", mant)
		}
		if exp != "" {
			e, _ := strconv.ParseInt(exp, 10, 64)
			p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(abs64(e)), nil))
			if e < 0 {
				p.Inv(p)
			}
			r.Mul(r, p)
		}
		r.Mul(r, big.NewRat(1e9, 1))
		// Round half away from zero.
		half := big.NewRat(1, 2)
		if r.Sign() < 0 {
			half.Neg(half)
		}
		r.Add(r, half)
		want := new(big.Int).Quo(r.Num(), r.Denom())
		if !want.IsInt64() {
			if err == nil {
				t.Fatalf("parseSeconds(%q) = %d, want out of range (%v ns)", s, d, want)
			}
			return
		}
		if err != nil || int64(d) != want.Int64() {
			t.Fatalf("parseSeconds(%q) = %d, %v; want %v", s, d, err, want)
		}
	})
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// FuzzParseClass checks the class names' parser against String and the
// text encoding: exactly the three names parse, each to the class that
// prints as it, and every class value either prints and reads back as
// itself or (out of range) refuses to encode.
func FuzzParseClass(f *testing.F) {
	for _, s := range []string{"unknown", "transient", "permanent", "", "Permanent", " transient", "Class(3)", "lease_expired"} {
		f.Add(s, uint8(0))
	}
	f.Add("x", uint8(3))
	f.Add("x", uint8(255))
	f.Fuzz(func(t *testing.T, s string, v uint8) {
		c, err := ParseClass(s)
		valid := s == "unknown" || s == "transient" || s == "permanent"
		if (err == nil) != valid || (err == nil && c.String() != s) || (err != nil && c != ClassUnknown) {
			t.Fatalf("ParseClass(%q) = %v, %v", s, c, err)
		}
		var u Class
		if uerr := u.UnmarshalText([]byte(s)); (uerr == nil) != valid || u != c {
			t.Fatalf("UnmarshalText(%q) = %v, %v; ParseClass gave %v, %v", s, u, uerr, c, err)
		}
		class := Class(v)
		text, merr := class.MarshalText()
		if v > uint8(ClassPermanent) {
			if merr == nil || class.String() != "Class("+strconv.Itoa(int(v))+")" {
				t.Fatalf("Class(%d): MarshalText = %q, %v; String %q", v, text, merr, class.String())
			}
			return
		}
		back, perr := ParseClass(string(text))
		if merr != nil || perr != nil || back != class || string(text) != class.String() {
			t.Fatalf("Class(%d): text %q (%v) reads back as %v (%v)", v, text, merr, back, perr)
		}
	})
}
