package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestStrictBodies: bodies that encoding/json would accept in one of two
// readings, or with text it would silently change, get a 400 naming the
// field, and nothing is enqueued; payloads stay opaque.
func TestStrictBodies(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []struct {
		path, body, field string
	}{
		{"/v1/tasks", `{"type":"a","type":"b"}`, "type"},
		{"/v1/tasks", `{"type":"a","Type":"b"}`, "Type"}, // the decoder matches names without regard to case
		{"/v1/tasks", `{"type":"a","idempotency_key":"k","idempotency_key":"k2"}`, "idempotency_key"},
		{"/v1/tasks", `{"type":"a","idempotency_key":"\ud800"}`, "idempotency_key"},
		{"/v1/tasks", `{"type":"a","idempotency_key":"x\udc00"}`, "idempotency_key"},
		{"/v1/tasks", `{"type":"a","idempotency_key":"\ud800\u0041"}`, "idempotency_key"},
		{"/v1/tasks", "{\"type\":\"a\",\"idempotency_key\":\"\xff\"}", "idempotency_key"},
		{"/v1/tasks", `{"type":"a","idempotency_key":7}`, "idempotency_key"},
		{"/v1/tasks/batch", `{"tasks":[{"type":"a"},{"type":"a","max_attempts":1,"max_attempts":2}]}`, "tasks[1].max_attempts"},
		{"/v1/tasks/batch", `{"tasks":[{"type":"a"}],"tasks":[]}`, "tasks"},
		{"/v1/leases", `{"worker_id":"w\ud800","types":["a"]}`, "worker_id"},
	} {
		r := e.do("POST", c.path, c.body)
		if r.status != http.StatusBadRequest || r.errCode() != CodeInvalidField || r.errField() != c.field {
			t.Errorf("%s %s: got %s, want 400 %s field %q", c.path, c.body, r, CodeInvalidField, c.field)
		}
	}
	if n := len(e.must(http.StatusOK, "GET", "/v1/tasks", nil).m["tasks"].([]any)); n != 0 {
		t.Fatalf("%d tasks enqueued by rejected requests", n)
	}

	// Accepted: a payload is stored exactly as given, repeated members and
	// odd escapes included; paired surrogates and distinct names are fine.
	payload := `{"a":1,"a":2,"s":"\ud800"}`
	r := e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a","payload":`+payload+`,"idempotency_key":"\ud83d\ude00 k"}`)
	if got := r.m["idempotency_key"]; got != "😀 k" {
		t.Fatalf("idempotency_key = %q", got)
	}
	id, _ := r.m["id"].(string)
	raw := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).raw
	if !bytes.Contains(raw, []byte(`"payload":`+payload)) {
		t.Fatalf("payload not kept as given: %s", raw)
	}
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a","payload":{"x":{"y":1},"X":[{"y":1,"z":2}]}}`)
}

func TestDuplicateMemberPaths(t *testing.T) {
	for _, c := range []struct {
		body  string
		where string
		name  string
	}{
		{`{"a":1,"b":{"c":1,"C":2}}`, "b", "C"},
		{`{"list":[{"x":1},{"x":1,"y":[1,{"z":1,"z":2}]}]}`, "list[1].y[1]", "z"},
		{`{"payload":{"a":1,"a":1},"tasks":[{"payload":[{"q":1,"q":2}],"t":1,"t":2}]}`, "tasks[0]", "t"},
		{`{"\u0061":1,"a":2}`, "", "a"},
		{`[[],{},[{"k":"v","k":"w"}]]`, "[2][0]", "k"},
	} {
		where, name, found := duplicateMember([]byte(c.body))
		if !found || where != c.where || name != c.name {
			t.Errorf("%s: got %q %q %v, want %q %q", c.body, where, name, found, c.where, c.name)
		}
	}
	for _, body := range []string{`{}`, `[]`, `1`, `"s"`, `{"a":{"a":{"a":1}},"b":[1,"}",{"c":"{\"c\":1}"}]}`, `{"payload":{"x":1,"x":2}}`, ` { "a" : [ 1 , 2 ] , "b" : null } `} {
		if where, name, found := duplicateMember([]byte(body)); found {
			t.Errorf("%s: reported %q %q", body, where, name)
		}
	}
	// Many members: the set takes over from the list.
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 100; i++ {
		b.WriteString(`"m` + strconv.Itoa(i) + `":1,`)
	}
	b.WriteString(`"M57":2}`)
	if _, name, found := duplicateMember([]byte(b.String())); !found || name != "M57" {
		t.Errorf("100 members: got %q %v", name, found)
	}
}

// FuzzDuplicateMember compares duplicateMember with a reference built on
// encoding/json's tokenizer, for every valid JSON text.
func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{`{"a":1,"A":2}`, `{"\u017f":1,"S":2}`, `{"\u212a":1,"k":2}`, `{"payload":{"a":1,"a":2}}`, `[{"x":[{"y":1,"y":2}]}]`, `{"s":"\"{","t":1}`, `{"a":{"b":1},"c":{"b":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		_, _, got := duplicateMember(data)
		if want := referenceDuplicate(t, data); got != want {
			t.Fatalf("%q: duplicateMember found=%v, reference %v", data, got, want)
		}
	})
}

// referenceDuplicate walks the tokens of data, valid JSON, with a stack
// of member sets.
func referenceDuplicate(t *testing.T, data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // valid JSON may hold numbers no float64 holds
	type frame struct {
		object bool
		names  []string
		key    bool // the next string token is a member name
	}
	var stack []*frame
	skip := 0 // depth inside a payload value
	pendingPayload := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		valueDone := func() {
			if f := top(); f != nil && f.object {
				f.key = true
			}
		}
		if skip > 0 {
			switch tok {
			case json.Delim('{'), json.Delim('['):
				skip++
			case json.Delim('}'), json.Delim(']'):
				skip--
				if skip == 0 {
					valueDone()
				}
			}
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if pendingPayload {
					pendingPayload = false
					skip = 1
					continue
				}
				stack = append(stack, &frame{object: v == '{', key: v == '{'})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if f := top(); f != nil && f.object && f.key {
				for _, n := range f.names {
					if strings.EqualFold(n, v) {
						return true
					}
				}
				f.names = append(f.names, v)
				f.key = false
				pendingPayload = strings.EqualFold(v, "payload")
				continue
			}
			pendingPayload = false
			valueDone()
		default:
			pendingPayload = false
			valueDone()
		}
	}
}

func TestValidJSONText(t *testing.T) {
	for raw, want := range map[string]bool{
		`""`:                     true,
		`"plain"`:                true,
		`"é \u00e9 \n \\u d800"`: true, // an escaped backslash, not an escape
		`"\ud83d\ude00"`:         true,
		`"\uD83D\uDE00"`:         true,
		`"\ufffd"`:               true,
		"\"\xef\xbf\xbd\"":       true, // U+FFFD itself, sent as such
		`"\ud800"`:               false,
		`"\udc00"`:               false,
		`"\ud800x"`:              false,
		`"\ud800\n"`:             false,
		`"\ud800\ud800"`:         false,
		`"\ude00\ud83d"`:         false,
		"\"\xff\"":               false,
		"\"\xed\xa0\x80\"":       false, // a surrogate encoded in UTF-8
	} {
		if got := validJSONText([]byte(raw)); got != want {
			t.Errorf("validJSONText(%s) = %v, want %v", raw, got, want)
		}
	}
}

// TestEncodedBodyIsUnsupportedMediaType: a body sent with a content coding
// (Content-Encoding: gzip), which the server does not decode, is a 415
// naming the coding, not a 400 about the compressed bytes' first
// character; "identity" is no coding.
func TestEncodedBodyIsUnsupportedMediaType(t *testing.T) {
	e := newEnv(t, envOpts{})
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(`{"type":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	withCoding := func(c string) reqOpt { return func(r *http.Request) { r.Header.Set("Content-Encoding", c) } }
	r := e.mustErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "", "POST", "/v1/tasks", buf.Bytes(), withCoding("gzip"))
	if !strings.Contains(r.errMsg(), "Content-Encoding gzip") {
		t.Fatalf("message does not name the coding: %s", r.raw)
	}
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`, withCoding("identity"))
	if ts := e.must(http.StatusOK, "GET", "/v1/tasks", nil).m["tasks"].([]any); len(ts) != 1 {
		t.Fatalf("tasks after one accepted enqueue: %d", len(ts))
	}
}
