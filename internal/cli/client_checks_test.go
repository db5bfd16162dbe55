package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"
)

// TestCLIErrorAnswerReachesTheTerminalClean: the message and code of a
// JSON error answer are server data, printed on one line without escape
// sequences or line breaks (a foreign or compromised server, or a proxy
// answering in the API's shape, could retitle the terminal or forge lines).
func TestCLIErrorAnswerReachesTheTerminalClean(t *testing.T) {
	clearServerEnv(t)
	t.Setenv("RETRYQ_SERVER", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found\u001b[31m","message":"no task \u001b]0;pwned\u0007here\nretryq: all good\u202e","field":"id"}}`)
	}))
	defer srv.Close()
	st, out, errOut := cli(t, "", "tasks", "get", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2", "--server", srv.URL)
	line := strings.TrimSuffix(errOut, "\n")
	if st != exitFailure || out != "" || strings.IndexFunc(line, unprintable) >= 0 ||
		!strings.Contains(line, "no task here retryq: all good") || !strings.Contains(line, "HTTP 404 not_found") {
		t.Errorf("tasks get against a server answering control characters: status %d\nstdout: %q\nstderr: %q", st, out, errOut)
	}
}

// TestBadTokenIsAUsageError: a token that cannot be sent in an HTTP header
// (control characters) is a bad flag or variable, named, exit 2, before any
// request; it was reported as the server being unreachable (exit 1).
func TestBadTokenIsAUsageError(t *testing.T) {
	clearServerEnv(t)
	t.Setenv("RETRYQ_SERVER", "")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	for _, tok := range []string{"ab\x01c", "ab\x7fc", "ab\x00c", "ab\x1b[31mc"} {
		st, _, errOut := cli(t, "", "stats", "--server", srv.URL, "--token", tok)
		if st != exitUsage || !strings.Contains(errOut, "--token") || strings.ContainsFunc(errOut, func(r rune) bool { return r != '\n' && unicode.IsControl(r) }) {
			t.Errorf("stats --token %q: status %d, stderr %q; want %d naming --token", tok, st, errOut, exitUsage)
		}
	}
	t.Setenv("RETRYQ_API_TOKEN", "ab\x01c")
	if st, _, errOut := cli(t, "", "stats", "--server", srv.URL); st != exitUsage || !strings.Contains(errOut, "RETRYQ_API_TOKEN") {
		t.Errorf("stats with RETRYQ_API_TOKEN holding a control character: status %d, stderr %q; want %d naming RETRYQ_API_TOKEN", st, errOut, exitUsage)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d request(s) sent with a bad token", n)
	}
}

// TestServerURLWithBadPortIsAUsageError: a --server whose port is not one
// (99999, 0, letters) is a bad flag, exit 2; it was "cannot reach the
// server" with exit status 1.
func TestServerURLWithBadPortIsAUsageError(t *testing.T) {
	clearServerEnv(t)
	t.Setenv("RETRYQ_SERVER", "")
	for _, u := range []string{"http://127.0.0.1:99999", "127.0.0.1:0", "http://127.0.0.1:65536/x"} {
		st, _, errOut := cli(t, "", "stats", "--server", u)
		if st != exitUsage || !strings.Contains(errOut, "--server") {
			t.Errorf("stats --server %q: status %d, stderr %q; want %d naming --server", u, st, errOut, exitUsage)
		}
	}
	for in, want := range map[string]string{"http://127.0.0.1:65535": "http://127.0.0.1:65535", "h:1": "http://h:1", "http://[::1]:80": "http://[::1]:80"} {
		if got, err := normalizeServerURL(in); err != nil || got != want {
			t.Errorf("normalizeServerURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestCLIOneLineAnswersReachTheTerminalClean: the lines enqueue, tasks
// cancel and retry, and types set print from a task or type the server
// answered (id, type, state, dead reason) hold no escape sequences or line
// breaks, as the tables' cells do not: they were printed raw.
func TestCLIOneLineAnswersReachTheTerminalClean(t *testing.T) {
	clearServerEnv(t)
	t.Setenv("RETRYQ_SERVER", "")
	const task = `{"id":"01HXZ5K3J8T9M2Q4V6W8Y0A1B2\u001b]0;pwned\u0007","type":"a.b\u001b[2J\nretryq: ok","state":"dead\u009b31m",` +
		`"dead_reason":"x\u001b[31m","idempotency_key":"k","duplicate":%s,"run_at":"2024-05-01T12:00:00Z","created_at":"2024-05-01T12:00:00Z"}`
	var duplicate atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/types/") {
			_, _ = io.WriteString(w, `{"type":"a.b\u001b[2J","retry":{"backoff":"exponential\u001b[31m"}}`)
			return
		}
		_, _ = io.WriteString(w, strings.Replace(task, "%s", map[bool]string{true: "true", false: "false"}[duplicate.Load()], 1))
	}))
	defer srv.Close()
	policy := t.TempDir() + "/p.json"
	writeTestFile(t, policy, `{"priority": 1}`)
	for _, tc := range []struct {
		dup  bool
		args []string
	}{
		{false, []string{"enqueue", "a.b"}},
		{true, []string{"enqueue", "a.b", "--key", "k"}},
		{false, []string{"tasks", "cancel", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2"}},
		{false, []string{"tasks", "retry", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2"}},
		{false, []string{"types", "set", "a.b", "--file", policy}},
	} {
		duplicate.Store(tc.dup)
		st, out, errOut := cli(t, "", append(tc.args, "--server", srv.URL)...)
		if st != exitOK || strings.ContainsFunc(strings.ReplaceAll(out, "\n", ""), unprintable) ||
			(tc.args[0] != "types" && strings.Count(out, "\n") != 1) {
			t.Errorf("retryq %s: status %d\nstdout: %q\nstderr: %q", strings.Join(tc.args, " "), st, out, errOut)
		}
	}
}
