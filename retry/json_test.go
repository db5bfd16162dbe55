package retry

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPolicyJSONFullDocument(t *testing.T) {
	doc := `{"backoff": "exponential", "initial_delay_seconds": 0.2, "multiplier": 1.5,
	 "max_delay_seconds": 300, "max_doublings": 3, "jitter": "equal", "jitter_fraction": 0.1,
	 "max_attempts": 7, "retry_window_seconds": 3600, "retry_on": ["ETIMEDOUT", "503"],
	 "no_retry_on": ["400", "invalid_format"]}`
	var p Policy
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	want := Policy{
		Backoff: BackoffExponential, InitialDelay: 200 * time.Millisecond, Multiplier: 1.5,
		MaxDelay: 300 * time.Second, MaxDoublings: 3, Jitter: JitterEqual, JitterFraction: 0.1,
		MaxAttempts: 7, RetryWindow: time.Hour, RetryOn: []string{"ETIMEDOUT", "503"},
		NoRetryOn: []string{"400", "invalid_format"},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v\nwant %+v", p, want)
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const wantOut = `{"backoff":"exponential","initial_delay_seconds":0.2,"multiplier":1.5,"max_delay_seconds":300,"max_doublings":3,"jitter":"equal","jitter_fraction":0.1,"max_attempts":7,"retry_window_seconds":3600,"retry_on":["ETIMEDOUT","503"],"no_retry_on":["400","invalid_format"]}`
	if string(out) != wantOut {
		t.Fatalf("marshal:\n got %s\nwant %s", out, wantOut)
	}
}

func TestPolicyJSONZeroIsEmptyObject(t *testing.T) {
	out, err := json.Marshal(Policy{})
	if err != nil || string(out) != "{}" {
		t.Fatalf("Marshal(Policy{}) = %s, %v", out, err)
	}
	out, _ = json.Marshal(DefaultPolicy())
	const want = `{"backoff":"exponential","initial_delay_seconds":1,"multiplier":2,"max_delay_seconds":300,"jitter":"proportional","jitter_fraction":0.25,"max_attempts":5}`
	if string(out) != want {
		t.Fatalf("Marshal(DefaultPolicy()) =\n%s\nwant\n%s", out, want)
	}
}

func TestPolicyJSONRoundTripExtremes(t *testing.T) {
	for _, p := range []Policy{
		{InitialDelay: time.Nanosecond, MaxDelay: math.MaxInt64, RetryWindow: 1234567*time.Hour + 987654321},
		{InitialDelay: -5 * time.Second, MaxDelay: math.MinInt64, Multiplier: math.SmallestNonzeroFloat64},
		{Multiplier: math.MaxFloat64, JitterFraction: 1e-300, MaxAttempts: math.MaxInt, MaxDoublings: math.MinInt},
	} {
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Policy
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if !reflect.DeepEqual(p, back) {
			t.Fatalf("round trip of %+v via %s gave %+v", p, out, back)
		}
	}
}

func TestPolicyJSONErrorsNameTheField(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"backof": "fixed"}`, `retry policy: backof: unknown field`},
		{`{"backoff": "quadratic"}`, `retry policy: backoff: unknown strategy "quadratic"`},
		{`{"jitter": "some"}`, `retry policy: jitter: unknown mode "some"`},
		{`{"max_attempts": "3"}`, `retry policy: max_attempts: must be a int (got string)`},
		{`{"max_attempts": 1.5}`, `retry policy: max_attempts: must be a int`},
		{`{"initial_delay_seconds": true}`, `retry policy: initial_delay_seconds: must be a number of seconds (got true)`},
		{`{"max_delay_seconds": "1s"}`, `retry policy: max_delay_seconds: must be a number of seconds (got "1s")`},
		{`{"max_delay_seconds": 1e300}`, `retry policy: max_delay_seconds: out of range`},
		{`{"retry_on": "503"}`, `retry policy: retry_on: must be a list of strings (got string)`},
		{`{"retry_on": [503]}`, `retry policy: retry_on: `},
		{`[1]`, `retry policy: `},
		{`{} {}`, `retry policy: unexpected data after the policy object`},
	}
	for _, tt := range tests {
		var p Policy
		err := p.UnmarshalJSON([]byte(tt.doc))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("UnmarshalJSON(%s) = %v, want prefix %q", tt.doc, err, tt.want)
			continue
		}
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("UnmarshalJSON(%s): %v does not wrap ErrInvalidPolicy", tt.doc, err)
		}
	}
}

func TestPolicyJSONNullLeavesPolicy(t *testing.T) {
	p := DefaultPolicy()
	if err := json.Unmarshal([]byte("null"), &p); err != nil || !reflect.DeepEqual(p, DefaultPolicy()) {
		t.Fatalf("null: %v %+v", err, p)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		p    Policy
		want string // "" = valid
	}{
		{Policy{}, ""},
		{DefaultPolicy(), ""},
		{Policy{InitialDelay: time.Hour}, ""}, // MaxDelay default follows InitialDelay
		{Policy{InitialDelay: time.Second, MaxDelay: 500 * time.Millisecond},
			"retry policy: max_delay_seconds: must be >= initial_delay_seconds (got 0.5 < 1)"},
		{Policy{Backoff: "x"}, "retry policy: backoff: unknown strategy"},
		{Policy{Jitter: "x"}, "retry policy: jitter: unknown mode"},
		{Policy{InitialDelay: -1}, "retry policy: initial_delay_seconds: must be > 0 (got -0.000000001)"},
		{Policy{MaxDelay: -time.Second}, "retry policy: max_delay_seconds: must be > 0 (got -1)"},
		{Policy{Multiplier: 0.5}, "retry policy: multiplier: must be a finite number >= 1 (got 0.5)"},
		{Policy{Multiplier: math.Inf(1)}, "retry policy: multiplier:"},
		{Policy{Multiplier: math.NaN()}, "retry policy: multiplier:"},
		{Policy{MaxDoublings: -1}, "retry policy: max_doublings: must be >= 0 (got -1)"},
		{Policy{JitterFraction: 1.5}, "retry policy: jitter_fraction: must be between 0 and 1 (got 1.5)"},
		{Policy{JitterFraction: math.NaN()}, "retry policy: jitter_fraction:"},
		{Policy{MaxAttempts: -2}, "retry policy: max_attempts: must be >= 1 (got -2)"},
		{Policy{RetryWindow: -time.Second}, "retry policy: retry_window_seconds: must be >= 0 (got -1)"},
		{Policy{RetryOn: []string{"503", ""}}, "retry policy: retry_on: entry 1 is empty"},
		{Policy{NoRetryOn: []string{""}}, "retry policy: no_retry_on: entry 0 is empty"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want nil", tt.p, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("Validate(%+v) = %v, want prefix %q", tt.p, err, tt.want)
		case tt.want != "" && !errors.Is(err, ErrInvalidPolicy):
			t.Errorf("Validate(%+v) = %v, not ErrInvalidPolicy", tt.p, err)
		}
	}
	var fe *FieldError
	if err := (Policy{MaxAttempts: -1}).Validate(); !errors.As(err, &fe) || fe.Field != "max_attempts" {
		t.Errorf("FieldError.Field = %+v", fe)
	}
}

func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0}, {"1", time.Second}, {"0.2", 200 * time.Millisecond}, {"-1.5", -1500 * time.Millisecond},
		{"1e3", 1000 * time.Second}, {"1.5E-3", 1500 * time.Microsecond}, {"0.0000000005", 1},
		{"0.0000000004", 0}, {"0.00000000049999", 0}, {"1e-100000000000000", 0},
		{"9223372036.854775807", math.MaxInt64}, {"-9223372036.854775808", math.MinInt64},
		{"0.000e5", 0},
	} {
		got, err := parseSeconds(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "-", ".5", "1.", "1e", "1e+", "01", "000", "0x10", "1.2.3", "9223372036.854775808", "1e20", "nan"} {
		if _, err := parseSeconds(bad); err == nil {
			t.Errorf("parseSeconds(%q) succeeded", bad)
		}
	}
	for _, d := range []time.Duration{0, 1, -1, time.Second, 1500 * time.Millisecond, math.MaxInt64, math.MinInt64} {
		if back, err := parseSeconds(formatSeconds(d)); err != nil || back != d {
			t.Errorf("round trip %d via %q = %d, %v", d, formatSeconds(d), back, err)
		}
	}
}

// A non-zero duration too small to hold a nanosecond used to round to 0,
// which means "default" (1s delay, 300s cap) or, for the retry window, "no
// limit": a tiny window became an unlimited one and a tiny negative delay
// slipped past Validate. Such values are refused, naming the field.
func TestPolicyJSONRefusesDurationsBelowOneNanosecond(t *testing.T) {
	for _, doc := range []string{
		`{"retry_window_seconds": 1e-10}`,
		`{"retry_window_seconds": 0.0000000004}`,
		`{"initial_delay_seconds": -1e-10}`,
		`{"max_delay_seconds": 1e-1000000000000}`,
	} {
		var p Policy
		err := json.Unmarshal([]byte(doc), &p)
		field := doc[2 : strings.Index(doc[2:], `"`)+2]
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "retry policy: "+field+": ") {
			t.Errorf("Unmarshal(%s) = %v (%+v), want an error naming %s", doc, err, p, field)
		}
	}
	// Zero in any spelling still means the default, and half a nanosecond
	// still rounds up to one.
	for doc, want := range map[string]Policy{
		`{"retry_window_seconds": 0}`:              {},
		`{"retry_window_seconds": -0.0e-3}`:        {},
		`{"initial_delay_seconds": 0.000}`:         {},
		`{"retry_window_seconds": 0.0000000005}`:   {RetryWindow: 1},
		`{"initial_delay_seconds": -0.0000000005}`: {InitialDelay: -1},
	} {
		var p Policy
		if err := json.Unmarshal([]byte(doc), &p); err != nil || !reflect.DeepEqual(p, want) {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", doc, p, err, want)
		}
	}
}

// encoding/json matches field names without regard to case, so
// "MAX_ATTEMPTS" used to set max_attempts and {"max_attempts": 3,
// "Max_Attempts": 7} to mean 7 to retryq and 3 to any other reader of the
// same document. The documented names are the only ones accepted.
func TestPolicyJSONFieldNamesAreExact(t *testing.T) {
	for doc, field := range map[string]string{
		`{"MAX_ATTEMPTS": 3}`:                       "MAX_ATTEMPTS",
		`{"max_attempts": 3, "Max_Attempts": 7}`:    "Max_Attempts",
		`{"Backoff": "fixed"}`:                      "Backoff",
		`{"jitter": "none", "retry_ON": ["503"]}`:   "retry_ON",
		`{"Retry_Window_Seconds": 5, "backoff": 1}`: "Retry_Window_Seconds",
	} {
		var p Policy
		err := json.Unmarshal([]byte(doc), &p)
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || err.Error() != "retry policy: "+field+": unknown field" {
			t.Errorf("Unmarshal(%s) = %v (%+v), want %s refused as an unknown field", doc, err, p, field)
		}
	}
}
