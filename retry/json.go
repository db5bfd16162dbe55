package retry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"
)

// policyJSON is the wire form of Policy. Durations are decimal seconds kept
// as text so that they convert exactly (see seconds.go).
type policyJSON struct {
	Backoff        string          `json:"backoff,omitempty"`
	InitialDelay   json.RawMessage `json:"initial_delay_seconds,omitempty"`
	Multiplier     float64         `json:"multiplier,omitempty"`
	MaxDelay       json.RawMessage `json:"max_delay_seconds,omitempty"`
	MaxDoublings   int             `json:"max_doublings,omitempty"`
	Jitter         string          `json:"jitter,omitempty"`
	JitterFraction float64         `json:"jitter_fraction,omitempty"`
	MaxAttempts    int             `json:"max_attempts,omitempty"`
	RetryWindow    json.RawMessage `json:"retry_window_seconds,omitempty"`
	RetryOn        []string        `json:"retry_on,omitempty"`
	NoRetryOn      []string        `json:"no_retry_on,omitempty"`
}

// MarshalJSON writes p in its public JSON form:
//
//	{"backoff": "exponential", "initial_delay_seconds": 1, "multiplier": 2,
//	 "max_delay_seconds": 300, "max_doublings": 0, "jitter": "proportional",
//	 "jitter_fraction": 0.25, "max_attempts": 5, "retry_window_seconds": 0,
//	 "retry_on": ["503"], "no_retry_on": ["400"]}
//
// Durations are seconds, written exactly (fractions allowed, e.g. 0.2).
// Zero-valued fields mean "default" and are left out, so the zero Policy
// is {}; marshal p.WithDefaults() to show every effective value.
// Decoding the output with [Policy.UnmarshalJSON] gives back p exactly
// (empty code lists come back as nil).
func (p Policy) MarshalJSON() ([]byte, error) {
	w := policyJSON{
		Backoff:        string(p.Backoff),
		Multiplier:     p.Multiplier,
		MaxDoublings:   p.MaxDoublings,
		Jitter:         string(p.Jitter),
		JitterFraction: p.JitterFraction,
		MaxAttempts:    p.MaxAttempts,
		RetryOn:        p.RetryOn,
		NoRetryOn:      p.NoRetryOn,
	}
	w.InitialDelay = secondsNumber(p.InitialDelay)
	w.MaxDelay = secondsNumber(p.MaxDelay)
	w.RetryWindow = secondsNumber(p.RetryWindow)
	return json.Marshal(w)
}

func secondsNumber(d time.Duration) json.RawMessage {
	if d == 0 {
		return nil
	}
	return json.RawMessage(formatSeconds(d))
}

// UnmarshalJSON reads the JSON form described at [Policy.MarshalJSON]. All
// fields are optional; unknown fields (field names are matched exactly,
// case included), values of the wrong type, unknown backoff or jitter names
// and out-of-range durations (including non-zero ones below a nanosecond,
// which would otherwise read as 0, the default) are errors that name the
// field and wrap [ErrInvalidPolicy]. Other checks (such as max delay >=
// initial delay) are left to [Policy.Validate]. The JSON literal null leaves
// p unchanged.
func (p *Policy) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	if err := inexactFieldError(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w policyJSON
	if err := dec.Decode(&w); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &FieldError{Reason: "unexpected data after the policy object"}
	}
	var q Policy
	switch b := Backoff(w.Backoff); b {
	case "", BackoffFixed, BackoffLinear, BackoffExponential, BackoffDecorrelated:
		q.Backoff = b
	default:
		return fieldErr("backoff", "unknown strategy %q (want fixed, linear, exponential or decorrelated)", w.Backoff)
	}
	switch j := Jitter(w.Jitter); j {
	case "", JitterNone, JitterProportional, JitterFull, JitterEqual:
		q.Jitter = j
	default:
		return fieldErr("jitter", "unknown mode %q (want none, proportional, full or equal)", w.Jitter)
	}
	var err error
	if q.InitialDelay, err = decodeSeconds("initial_delay_seconds", w.InitialDelay); err != nil {
		return err
	}
	if q.MaxDelay, err = decodeSeconds("max_delay_seconds", w.MaxDelay); err != nil {
		return err
	}
	if q.RetryWindow, err = decodeSeconds("retry_window_seconds", w.RetryWindow); err != nil {
		return err
	}
	q.Multiplier = w.Multiplier
	q.MaxDoublings = w.MaxDoublings
	q.JitterFraction = w.JitterFraction
	q.MaxAttempts = w.MaxAttempts
	if len(w.RetryOn) > 0 {
		q.RetryOn = w.RetryOn
	}
	if len(w.NoRetryOn) > 0 {
		q.NoRetryOn = w.NoRetryOn
	}
	*p = q
	return nil
}

func decodeSeconds(field string, raw json.RawMessage) (time.Duration, error) {
	n := bytes.TrimSpace(raw)
	if len(n) == 0 || string(n) == "null" {
		return 0, nil
	}
	// Taking the raw value (rather than json.Number) lets a string such as
	// "1s" be reported against its field instead of as malformed JSON.
	if c := n[0]; c != '-' && (c < '0' || c > '9') {
		return 0, fieldErr(field, "must be a number of seconds (got %.40s)", string(n))
	}
	d, err := parseSeconds(string(n))
	if err != nil {
		return 0, fieldErr(field, "%v (got %.40s)", err, string(n))
	}
	if d == 0 && !zeroNumber(string(n)) {
		// 0 means the default (or no limit): a tiny value must not.
		return 0, fieldErr(field, "non-zero but below a nanosecond (got %.40s)", string(n))
	}
	return d, nil
}

// zeroNumber reports whether the JSON number s is zero ("0", "-0.00e5").
func zeroNumber(s string) bool {
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	return strings.Trim(mant, "-0.") == ""
}

// policyFields are the JSON field names of policyJSON.
var policyFields = func() []string {
	t := reflect.TypeFor[policyJSON]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}()

// inexactFieldError returns a FieldError for the first member of the JSON
// object in data whose name is not exactly a field name of the policy, or
// nil. encoding/json matches names regardless of case, so without this
// check "MAX_ATTEMPTS" would set max_attempts, and {"max_attempts": 3,
// "Max_Attempts": 7} would mean 7 here and 3 to other JSON readers. Data
// that is not a well-formed object is left to the full decode to report.
func inexactFieldError(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		if !slices.Contains(policyFields, name) {
			return &FieldError{Field: name, Reason: "unknown field"}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// decodeError turns encoding/json errors into FieldErrors naming the JSON
// field rather than the Go type.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		want := te.Type.Kind().String()
		switch {
		case te.Type.Kind() == 0:
		case strings.HasPrefix(te.Type.String(), "json.Number"):
			want = "number"
		case te.Type.String() == "[]string":
			want = "list of strings"
		}
		return fieldErr(field, "must be a %s (got %s)", want, te.Value)
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &FieldError{Field: strings.Trim(rest, `"`), Reason: "unknown field"}
	}
	return &FieldError{Reason: fmt.Sprintf("malformed JSON: %s", strings.TrimPrefix(msg, "json: "))}
}
