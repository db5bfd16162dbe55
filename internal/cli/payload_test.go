package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
)

// storedPayload returns the payload of task id as the API answers it.
func storedPayload(t *testing.T, s *apiServer, id string) string {
	t.Helper()
	resp, err := http.Get(s.url + "/v1/tasks/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("GET task %s: %v: %s", id, err, raw)
	}
	return string(v.Payload)
}

// TestCLIEnqueueKeepsThePayloadAsGiven: "retryq enqueue --payload" sends
// the payload as given, compacted, from an argument, a file or standard
// input: the server stores and answers it as it would a curl's. Numbers
// float64 cannot hold (1e400) were refused as not JSON (the CLI decoded
// the payload into a Go value to check it), and <, >, & and U+2028/U+2029
// reached the server escaped (\u003c...): the same value, but other bytes
// than the user's, in every answer and push body. "retryq tasks get
// --json" shows them as stored.
func TestCLIEnqueueKeepsThePayloadAsGiven(t *testing.T) {
	s := startAPIServer(t, nil)
	file := filepath.Join(t.TempDir(), "payload.json")
	cases := []struct{ given, want string }{
		{`1e400`, `1e400`},
		{`[9007199254740993, -0, 1.0, 1E+2, 0.1e-400]`, `[9007199254740993,-0,1.0,1E+2,0.1e-400]`},
		{`{"html": "<b>a & b</b>", "ls": "` + "\u2028\u2029" + `", "esc": "\u003c\/"}`,
			`{"html":"<b>a & b</b>","ls":"` + "\u2028\u2029" + `","esc":"\u003c\/"}`},
		{"{\n  \"b\": 1,\n  \"a\": 2,\n  \"a\": \"\\u0000 😀\"\n}\n", `{"b":1,"a":2,"a":"\u0000 😀"}`},
	}
	for _, c := range cases {
		writeTestFile(t, file, c.given)
		for _, src := range []struct{ stdin, arg string }{{"", c.given}, {"", "@" + file}, {c.given, "@-"}} {
			st, out, errOut := cli(t, src.stdin, "enqueue", "p", "--payload", src.arg, "--json", "--server", s.url)
			if st != 0 {
				t.Errorf("enqueue --payload %q: status %d, stderr %q", src.arg, st, errOut)
				continue
			}
			var task apiTask
			if err := json.Unmarshal([]byte(out), &task); err != nil {
				t.Fatalf("enqueue --json: %v: %s", err, out)
			}
			if got := storedPayload(t, s, task.ID); got != c.want {
				t.Errorf("enqueue --payload %q: stored %q, want %q", src.arg, got, c.want)
			}
			// tasks get --json indents the answer: the same bytes but
			// for white space.
			var shown apiTask
			s.cliJSON(t, &shown, "tasks", "get", task.ID)
			if got := compactJSON(t, shown.Payload); got != c.want {
				t.Errorf("tasks get --json after enqueue --payload %q: payload %q, want %q", src.arg, got, c.want)
			}
		}
	}
}
