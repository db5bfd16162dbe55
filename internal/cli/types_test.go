package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCLITypes: set from a file, get and list; an invalid policy is
// rejected by the server with the field named (exit 1), a file that is not
// JSON by the CLI (exit 2).
func TestCLITypes(t *testing.T) {
	s := startAPIServer(t, nil)
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.json")
	writeTestFile(t, good, `{
  "retry": {"backoff": "exponential", "initial_delay_seconds": 2, "multiplier": 2,
            "max_delay_seconds": 600, "jitter": "full", "max_attempts": 8,
            "retry_window_seconds": 86400, "no_retry_on": ["400", "422"]},
  "timeout_seconds": 30,
  "priority": 10,
  "target": {"url": "http://127.0.0.1:1/send", "timeout_seconds": 10, "concurrency": 8}
}`)
	out := s.cliOK(t, "types", "set", "email.send", "--file", good)
	wantOutput(t, "types set", out, "stored the configuration of email.send", "exponential from 2s ×2 up to 10m0s",
		"Max attempts", "8", "24h0m0s", "400, 422", "30s", "POST http://127.0.0.1:1/send (timeout 10s, concurrency 8)")

	var tc apiTypeConfig
	s.cliJSON(t, &tc, "types", "get", "email.send")
	if !tc.Stored || tc.Retry.MaxAttempts != 8 || tc.Priority != 10 || tc.Target == nil || tc.Target.Concurrency != 8 {
		t.Errorf("types get --json: %+v", tc)
	}
	out = s.cliOK(t, "types", "get", "never/configured")
	wantOutput(t, "types get of an unconfigured type", out, "never/configured", "no (server defaults)", "none (workers run it)")

	// From standard input, a type name with slashes.
	st, out, errOut := cli(t, `{"retry": {"backoff": "fixed", "initial_delay_seconds": 5}, "timeout_seconds": 2.5}`,
		"types", "set", "img/resize", "--file", "-", "--server", s.url)
	if st != 0 || !strings.Contains(out, "fixed from 5s") || !strings.Contains(out, "2.5s") {
		t.Errorf("types set --file -: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	out = s.cliOK(t, "types", "list")
	wantOutput(t, "types list", out, "TYPE", "BACKOFF", "email.send", "img/resize", "POST http://127.0.0.1:1/send")
	var list struct{ Types []apiTypeConfig }
	s.cliJSON(t, &list, "types", "list")
	if len(list.Types) != 2 {
		t.Errorf("types list --json: %+v", list)
	}

	// Invalid: the server names the field; the CLI adds the file.
	bad := filepath.Join(dir, "bad.json")
	writeTestFile(t, bad, `{"retry": {"initial_delay_seconds": 10, "max_delay_seconds": 5}}`)
	st, out, errOut = cli(t, "", "types", "set", "email.send", "--file", bad, "--server", s.url)
	if st != 1 || out != "" || !strings.Contains(errOut, bad+": retry.max_delay_seconds: must be >= initial_delay_seconds") ||
		!strings.Contains(errOut, "HTTP 400 invalid_field") {
		t.Errorf("types set with an invalid policy: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	writeTestFile(t, bad, `{"retry": {"max_attempts": 3}, "timeout": 30}`)
	st, _, errOut = cli(t, "", "types", "set", "email.send", "--file", bad, "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "timeout: unknown field") {
		t.Errorf("types set with an unknown field: status %d\nstderr: %s", st, errOut)
	}
	// Not JSON, or not an object: a usage error naming --file and the line.
	writeTestFile(t, bad, "{\n  \"retry\": {\n    \"max_attempts\": 3,\n  }\n}")
	st, _, errOut = cli(t, "", "types", "set", "email.send", "--file", bad, "--server", s.url)
	if st != 2 || !strings.Contains(errOut, "--file: "+bad+" is not valid JSON") || !strings.Contains(errOut, "line 4") {
		t.Errorf("types set with broken JSON: status %d\nstderr: %s", st, errOut)
	}
	writeTestFile(t, bad, `[1]`)
	if st, _, errOut = cli(t, "", "types", "set", "email.send", "--file", bad, "--server", s.url); st != 2 || !strings.Contains(errOut, "must hold a JSON object") {
		t.Errorf("types set with an array: status %d\nstderr: %s", st, errOut)
	}
	// The stored configuration is unchanged.
	s.cliJSON(t, &tc, "types", "get", "email.send")
	if tc.Retry.MaxAttempts != 8 {
		t.Errorf("a rejected set changed the type: %+v", tc)
	}
}

// TestCLITypesSetOfGetOutputSaysWhatToLeaveOut: the natural round trip
// "types get --json > f; edit f; types set --file f" is refused by the
// server (the answer's type, updated_at and stored are not fields of the
// body); the error says which members to leave out rather than only
// "type: unknown field", which names a member the answer itself holds.
func TestCLITypesSetOfGetOutputSaysWhatToLeaveOut(t *testing.T) {
	s := startAPIServer(t, nil)
	f := filepath.Join(t.TempDir(), "t.json")
	writeTestFile(t, f, `{"retry": {"max_attempts": 3}}`)
	s.cliOK(t, "types", "set", "email.send", "--file", f)
	out := s.cliOK(t, "types", "get", "email.send", "--json")
	writeTestFile(t, f, out)
	st, _, errOut := cli(t, "", "types", "set", "email.send", "--file", f, "--server", s.url)
	if st != exitFailure || !strings.Contains(errOut, "HTTP 400 invalid_field") ||
		!strings.Contains(errOut, `leave out "type", "updated_at" and "stored"`) {
		t.Errorf("types set of types get's output: status %d, stderr: %s", st, errOut)
	}
	// Another field's error gets no such hint.
	writeTestFile(t, f, `{"retry": {"max_attempts": 3}, "timeout": 30}`)
	if st, _, errOut = cli(t, "", "types", "set", "email.send", "--file", f, "--server", s.url); st != exitFailure ||
		strings.Contains(errOut, "leave out") {
		t.Errorf("types set with an unknown field: status %d, stderr: %s", st, errOut)
	}
}
