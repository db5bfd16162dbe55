package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Strict JSON: what encoding/json lets through silently.
//
// encoding/json keeps the last of two members with the same name (and
// matches struct fields without regard to case), and it decodes invalid
// UTF-8 and unpaired UTF-16 surrogate escapes to U+FFFD. In a request that
// means an ambiguous body is accepted as one of its readings, and two
// different idempotency keys can become the same key. So request bodies
// may not repeat a member name within one object (ignoring case) outside
// task payloads, which are stored exactly as given; and the text the
// server compares byte for byte (idempotency keys, worker and lease ids)
// must be valid Unicode as sent.

// duplicateMember returns where the first member whose name repeats an
// earlier one of the same object (ignoring case) sits, and its name,
// outside the values of members named "payload". data must be valid JSON
// (encoding/json accepted it, which also bounds its nesting).
func duplicateMember(data []byte) (where, name string, found bool) {
	s := dupScanner{data: data}
	if p := s.value(nil); p != nil {
		return p.parent.String(), p.name, true
	}
	return "", "", false
}

// jsonPath is a location in a JSON text, built only when reported.
type jsonPath struct {
	parent *jsonPath
	name   string // a member name, or "" for an array element
	index  int
}

// String renders p as in field errors: tasks[3].target.
func (p *jsonPath) String() string {
	if p == nil {
		return ""
	}
	parent := p.parent.String()
	if p.name == "" {
		return parent + "[" + strconv.Itoa(p.index) + "]"
	}
	if parent == "" {
		return p.name
	}
	return parent + "." + p.name
}

type dupScanner struct {
	data []byte
	i    int
}

func (s *dupScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans the value at s.i, located at at; it returns the path of the
// first repeated member found in it, or nil.
func (s *dupScanner) value(at *jsonPath) *jsonPath {
	s.space()
	if s.i >= len(s.data) {
		return nil
	}
	switch s.data[s.i] {
	case '{':
		s.i++
		var names []string          // folded names, while the object is small
		var set map[string]struct{} // once it is not
		for {
			s.space()
			if s.i >= len(s.data) || s.data[s.i] == '}' {
				s.i++
				return nil
			}
			if s.data[s.i] == ',' {
				s.i++
				s.space()
			}
			start := s.i
			s.skipString()
			name := unquote(s.data[start:s.i])
			folded := foldKey(name)
			member := &jsonPath{parent: at, name: name}
			if set != nil {
				if _, dup := set[folded]; dup {
					return member
				}
				set[folded] = struct{}{}
			} else {
				for _, n := range names {
					if n == folded {
						return member
					}
				}
				names = append(names, folded)
				if len(names) > 16 {
					set = make(map[string]struct{}, 2*len(names))
					for _, n := range names {
						set[n] = struct{}{}
					}
				}
			}
			s.space()
			s.i++ // ':'
			if strings.EqualFold(name, "payload") {
				s.skipValue()
			} else if p := s.value(member); p != nil {
				return p
			}
		}
	case '[':
		s.i++
		for n := 0; ; n++ {
			s.space()
			if s.i >= len(s.data) || s.data[s.i] == ']' {
				s.i++
				return nil
			}
			if s.data[s.i] == ',' {
				s.i++
			}
			if p := s.value(&jsonPath{parent: at, index: n}); p != nil {
				return p
			}
		}
	default:
		s.skipValue()
		return nil
	}
}

// skipString moves past the string starting at s.i.
func (s *dupScanner) skipString() {
	s.i++ // opening quote
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return
		default:
			s.i++
		}
	}
}

// skipValue moves past the value starting at s.i (after spaces), without
// looking into it.
func (s *dupScanner) skipValue() {
	s.space()
	if s.i >= len(s.data) {
		return
	}
	switch s.data[s.i] {
	case '"':
		s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case '"':
				s.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			}
			s.i++
		}
	default: // a number or a literal
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			s.i++
		}
	}
}

// foldKey maps names that strings.EqualFold (and encoding/json's field
// matching) treats as equal to the same key: each rune becomes the
// smallest rune of its case-folding orbit.
func foldKey(name string) string {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii { // the smallest rune of an ASCII letter's orbit is its upper case
		return strings.ToUpper(name)
	}
	var b strings.Builder
	for _, r := range name {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}

// unquote decodes a JSON string literal.
func unquote(raw []byte) string {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid JSON: cannot fail
	return s
}

// text is a string member the server compares byte for byte: it must be
// valid Unicode as sent (no invalid UTF-8, no unpaired surrogate escape),
// else encoding/json would turn it into U+FFFD and two different values
// into one.
type text string

var textType = reflect.TypeFor[text]()

// UnmarshalJSON implements json.Unmarshaler.
func (t *text) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		return nil // as for a string: unchanged
	case len(b) == 0 || b[0] != '"':
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: textType}
	case !validJSONText(b):
		return &json.UnmarshalTypeError{Value: "text with invalid UTF-8 or an unpaired surrogate escape", Type: textType}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*t = text(s)
	return nil
}

// jsonKind names the kind of a JSON value as encoding/json's errors do.
func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	default:
		return "number"
	}
}

// validJSONText reports whether the JSON string literal raw is valid UTF-8
// and pairs every surrogate escape.
func validJSONText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r, ok := hex4(raw, i+1)
		if !ok {
			return false
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false // a low surrogate alone
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return false
			}
			lo, ok := hex4(raw, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw[i:i+4]), 16, 32)
	return rune(v), err == nil
}
