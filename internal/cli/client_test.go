package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/api"
	"github.com/retryq/retryq/internal/engine"
)

// These tests run the API commands in-process through Main against a real
// server (startServer on a temporary SQLite database, 127.0.0.1:0).

// apiServer is a server started for a test.
type apiServer struct {
	rs  *runningServer
	url string
}

// startAPIServer starts a server on a fresh SQLite database; mod may adjust
// its options. It is shut down when the test ends.
func startAPIServer(t testing.TB, mod func(*serverOptions)) *apiServer {
	t.Helper()
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN", "RETRYQ_READ_TOKEN", "RETRYQ_DB", "RETRYQ_LISTEN"} {
		t.Setenv(k, "")
	}
	o := &serverOptions{
		db: "sqlite:" + filepath.Join(t.TempDir(), "q.db"), listen: "127.0.0.1:0", nodeID: "test-node",
		logFormat: "text", logLevel: "warn", maxBody: api.DefaultMaxBodyBytes, poll: 100 * time.Millisecond,
	}
	if mod != nil {
		mod(o)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs, err := startServer(context.Background(), o, log)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(rs.shutdown)
	return &apiServer{rs: rs, url: "http://" + rs.addr}
}

// cli runs "retryq ARGS" in-process with stdin and returns its status and output.
func cli(t *testing.T, stdin string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status = Main(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return status, out.String(), errOut.String()
}

// cliOK runs "retryq ARGS --server URL" and fails the test unless it exits 0.
func (s *apiServer) cliOK(t *testing.T, args ...string) string {
	t.Helper()
	st, out, errOut := cli(t, "", append(args, "--server", s.url)...)
	if st != 0 {
		t.Fatalf("retryq %s: status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), st, out, errOut)
	}
	return out
}

// cliJSON runs "retryq ARGS --server URL --json" and decodes its output into v.
func (s *apiServer) cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := s.cliOK(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("retryq %s --json: %v\noutput: %s", strings.Join(args, " "), err, out)
	}
}

// wantOutput fails unless s contains every one of wants.
func wantOutput(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s: want %q in:\n%s", what, w, s)
		}
	}
}

// killTasks makes n tasks of typ dead through the pull API of the engine
// (lease, then fail as not retryable with code) and returns their ids.
func killTasks(t testing.TB, s *apiServer, typ, code string, n int) []string {
	t.Helper()
	ctx := context.Background()
	reqs := make([]engine.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = engine.EnqueueRequest{Type: typ, Payload: json.RawMessage(`{"n":1}`)}
	}
	if _, err := s.rs.eng.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var ids []string
	no := false
	for i := 0; i < n+10 && len(ids) < n; i++ {
		ts, err := s.rs.eng.Lease(ctx, engine.LeaseRequest{WorkerID: "killer", Types: []string{typ}, Max: n, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for j := range ts {
			if _, err := s.rs.eng.Fail(ctx, ts[j].ID, engine.LeaseToken(&ts[j]),
				engine.ReportedError{Code: code, Message: "upstream said no", Retryable: &no}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ts[j].ID)
		}
	}
	if len(ids) != n {
		t.Fatalf("killed %d of %d tasks", len(ids), n)
	}
	return ids
}

func TestNormalizeServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:7420":   "http://127.0.0.1:7420",
		"127.0.0.1:7420":          "http://127.0.0.1:7420",
		"https://rq.example.com/": "https://rq.example.com",
		"http://h/prefix/":        "http://h/prefix",
	} {
		if got, err := normalizeServerURL(in); err != nil || got != want {
			t.Errorf("normalizeServerURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://h", "http://", "http://u:p@h", "http://h?x=1", "::"} {
		if got, err := normalizeServerURL(in); err == nil {
			t.Errorf("normalizeServerURL(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	env := &Env{Stdout: io.Discard, Stderr: io.Discard}
	fs := newFlagSet("x", "")
	j := fs.Bool("json", false, "")
	k := fs.String("key", "", "")
	pos, st, ok := parseArgs(env, fs, []string{"a", "--json", "b", "--key", "k", "--", "--c"})
	if !ok || st != 0 || !*j || *k != "k" || strings.Join(pos, " ") != "a b --c" {
		t.Errorf("parseArgs: pos %q st %d ok %v json %v key %q", pos, st, ok, *j, *k)
	}
}

// TestCLIServerUnreachable: a command against an address where nothing
// listens exits 1 and says what it tried and what to do.
func TestCLIServerUnreachable(t *testing.T) {
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN"} {
		t.Setenv(k, "")
	}
	addr := closedAddr(t)
	for _, args := range [][]string{{"stats"}, {"tasks", "list"}, {"enqueue", "x", "--payload", "{}"}, {"dlq", "summary"}} {
		st, out, errOut := cli(t, "", append(args, "--server", "http://"+addr)...)
		if st != 1 || out != "" || !strings.Contains(errOut, "cannot reach the retryq server at http://"+addr+": connection refused") ||
			!strings.Contains(errOut, "RETRYQ_SERVER") {
			t.Errorf("retryq %s against a closed port: status %d\nstdout: %s\nstderr: %s", args, st, out, errOut)
		}
	}
	// RETRYQ_SERVER is used when --server is not given.
	t.Setenv("RETRYQ_SERVER", addr)
	if st, _, errOut := cli(t, "", "stats"); st != 1 || !strings.Contains(errOut, "http://"+addr) {
		t.Errorf("stats with RETRYQ_SERVER=%s: status %d, stderr: %s", addr, st, errOut)
	}
}

// TestCLIAuth: against a server with tokens, a missing token is a clear
// error (exit 1), --token and RETRYQ_API_TOKEN work, and a read-only token
// may read but not write.
func TestCLIAuth(t *testing.T) {
	s := startAPIServer(t, func(o *serverOptions) {
		o.apiTokens = []string{"full-secret"}
		o.readTokens = []string{"read-secret"}
	})
	st, _, errOut := cli(t, "", "stats", "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "HTTP 401 unauthorized") || !strings.Contains(errOut, "--token") {
		t.Errorf("stats without a token: status %d, stderr: %s", st, errOut)
	}
	s.cliOK(t, "stats", "--token", "full-secret")
	t.Setenv("RETRYQ_API_TOKEN", "read-secret")
	s.cliOK(t, "stats")
	st, _, errOut = cli(t, "", "enqueue", "a.b", "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "HTTP 403") || !strings.Contains(errOut, "read-only") {
		t.Errorf("enqueue with a read-only token: status %d, stderr: %s", st, errOut)
	}
}

// TestCLIForbiddenSaysItOnce: a read-only token's 403 says what to do
// without repeating the server's "this token is read-only", and a 403 that
// is not the API's (a proxy's page) is not blamed on the token.
func TestCLIForbiddenSaysItOnce(t *testing.T) {
	s := startAPIServer(t, func(o *serverOptions) {
		o.apiTokens = []string{"full-secret"}
		o.readTokens = []string{"read-secret"}
	})
	st, _, errOut := cli(t, "", "enqueue", "a.b", "--server", s.url, "--token", "read-secret")
	if st != exitFailure || strings.Count(errOut, "read-only") != 1 || !strings.Contains(errOut, "full-access token") ||
		!strings.Contains(errOut, "--token") || !strings.Contains(errOut, "RETRYQ_API_TOKEN") {
		t.Errorf("enqueue with a read-only token: status %d, stderr: %s", st, errOut)
	}

	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, "<html><head><title>Access denied</title></head></html>")
	}))
	defer proxy.Close()
	st, _, errOut = cli(t, "", "stats", "--server", proxy.URL, "--token", "full-secret")
	if st != exitFailure || !strings.Contains(errOut, `"Access denied"`) || strings.Contains(errOut, "read-only") {
		t.Errorf("stats answered by a proxy's 403 page: status %d, stderr: %s", st, errOut)
	}
}

// TestCLIUsageErrors: bad flags and arguments exit 2 before any request,
// naming the flag.
func TestCLIUsageErrors(t *testing.T) {
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN"} {
		t.Setenv(k, "")
	}
	// No server runs at this address: a usage error must come first.
	srv := []string{"--server", "http://127.0.0.1:1"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"enqueue"}, "missing task TYPE"},
		{[]string{"enqueue", "bad type!"}, "TYPE"},
		{[]string{"enqueue", "a.b", "--payload", `{"x":`}, "--payload: value is not valid JSON"},
		{[]string{"enqueue", "a.b", "--delay", "soon"}, "--delay"},
		{[]string{"enqueue", "a.b", "--delay", "-5s"}, "--delay: must not be negative"},
		{[]string{"enqueue", "a.b", "--priority", "2000000"}, "--priority: must be between"},
		{[]string{"enqueue", "a.b", "--max-attempts", "0"}, "--max-attempts: must be between 1 and 10000"},
		{[]string{"enqueue", "a.b", "--run-at", "tomorrow"}, "--run-at: want an RFC 3339 time"},
		{[]string{"enqueue", "a.b", "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z"}, "--delay and --run-at"},
		{[]string{"enqueue", "a.b", "--frobnicate"}, "flag provided but not defined: --frobnicate"},
		{[]string{"enqueue", "a.b", "c.d"}, `unexpected argument "c.d"`},
		{[]string{"tasks"}, "Commands:"},
		{[]string{"tasks", "frob"}, `unknown command "frob"`},
		{[]string{"tasks", "list", "--limit", "0"}, "--limit: must be between 1 and 1000"},
		{[]string{"tasks", "list", "--state", "pending,zombie"}, `--state: unknown state "zombie"`},
		{[]string{"tasks", "get"}, "missing task ID"},
		{[]string{"tasks", "get", "a/b"}, "is not a task id"},
		{[]string{"tasks", "cancel", "x", "y"}, `unexpected argument "y"`},
		{[]string{"types", "set", "a.b"}, "--file: required"},
		{[]string{"types", "get"}, "missing TYPE"},
		{[]string{"dlq", "list", "--reason", "tired"}, "--reason: want one of non_retryable"},
		{[]string{"dlq", "summary", "--since", "last week"}, "--since: want an RFC 3339 time"},
		{[]string{"dlq", "redrive"}, "refusing to redrive every dead task"},
		{[]string{"dlq", "purge", "--yes"}, "refusing to purge every dead task"},
		{[]string{"dlq", "purge", "--all", "--batch", "0"}, "--batch: must be between 1 and 10000"},
		{[]string{"dlq", "redrive", "--id", "no/such"}, "--id:"},
		{[]string{"stats", "extra"}, `unexpected argument "extra"`},
		{[]string{"stats", "--server", "ftp://x"}, "--server: want a server URL"},
		{[]string{"worker", "--exec", "true"}, "--types: required"},
		{[]string{"worker", "--types", "a.b"}, "--exec: required"},
		{[]string{"worker", "--types", "a.b", "--exec", "true", "--concurrency", "0"}, "--concurrency: must be between 1 and 1000"},
		{[]string{"worker", "--types", "a.b", "--exec", "true", "--lease", "500ms"}, "--lease: must be between 1s and 1h"},
		{[]string{"worker", "--types", "a.b", "--exec", "true", "--permanent-exit", "2,300"}, "--permanent-exit"},
		{[]string{"worker", "--types", "a b", "--exec", "true"}, "--types"},
		{[]string{"demo", "--rate", "0"}, "--rate: must be between 0.1 and 1000"},
		{[]string{"demo", "--duration", "0s"}, "--duration: must be between 1s and 1h"},
		{[]string{"demo", "--listen", "0.0.0.0:0"}, "--listen: the demo's API takes no token"},
		{[]string{"demo", "--db", "mysql://x"}, "--db: unsupported database \"mysql://x\" (want sqlite:PATH"},
	}
	for _, tt := range tests {
		args := tt.args
		if len(args) > 1 && args[0] != "demo" && !strings.Contains(strings.Join(args, " "), "--server") {
			args = append(append([]string{}, args...), srv...)
		}
		st, out, errOut := cli(t, "", args...)
		if st != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("retryq %q: status %d, want 2 and %q\nstdout: %s\nstderr: %s", tt.args, st, tt.want, out, errOut)
		}
	}
	// Help goes to stdout with status 0.
	for _, args := range [][]string{{"tasks", "--help"}, {"tasks", "list", "-h"}, {"dlq", "redrive", "-h"}, {"worker", "-h"}, {"help", "demo"}} {
		if st, out, _ := cli(t, "", args...); st != 0 || !strings.Contains(out, "Usage: retryq") {
			t.Errorf("retryq %q: status %d\nstdout: %s", args, st, out)
		}
	}
}

// TestUnreadableInputFileIsAFailure: a --payload or --file that cannot be
// read (missing, a directory) fails with status 1, as "retryq help" says
// of a file that cannot be used, like "retryq demo --log"; one read and
// found to be no JSON stays a usage error (status 2). Neither asks the
// server (nothing listens at its address).
func TestUnreadableInputFileIsAFailure(t *testing.T) {
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	writeTestFile(t, notJSON, "{not json")
	missing := filepath.Join(dir, "missing.json")
	tests := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"enqueue", "a.b", "--payload", "@" + missing}, exitFailure, "--payload: open " + missing},
		{[]string{"enqueue", "a.b", "--payload", "@" + dir}, exitFailure, "--payload: read " + dir},
		{[]string{"types", "set", "a.b", "--file", missing}, exitFailure, "--file: open " + missing},
		{[]string{"enqueue", "a.b", "--payload", "@" + notJSON}, exitUsage, "is not valid JSON"},
		{[]string{"types", "set", "a.b", "--file", notJSON}, exitUsage, "is not valid JSON"},
	}
	for _, tt := range tests {
		st, out, errOut := cli(t, "", append(tt.args, "--server", "http://127.0.0.1:1")...)
		if st != tt.status || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("retryq %q: status %d, want %d and %q\nstdout: %s\nstderr: %s", tt.args, st, tt.status, tt.want, out, errOut)
		}
	}
}

// writeTestFile writes a file or fails the test.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// compactJSON returns raw compacted.
func compactJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.String()
}

// TestPayloadFromStdinTooLarge: a payload on standard input larger than
// the CLI reads is refused as too large, like a payload file, instead of
// being cut at the limit and then reported as invalid JSON.
func TestPayloadFromStdinTooLarge(t *testing.T) {
	big := `"` + strings.Repeat("a", maxResponseBytes) + `"`
	st, _, errOut := cli(t, big, "enqueue", "big.job", "--payload", "@-", "--server", "http://127.0.0.1:1")
	if st != 2 && st != 1 || !strings.Contains(errOut, "standard input is larger than") {
		t.Fatalf("status %d, stderr %q; want an error saying the input is too large", st, errOut)
	}
}

// TestPayloadNotUTF8IsUsageError: a --payload that is JSON but holds bytes
// that are not UTF-8 (from an argument, a file or standard input) is a
// usage error naming the flag, checked before anything is sent. It used to
// be sent, and the server's refusal (exit 1, naming the field "payload")
// was the answer.
func TestPayloadNotUTF8IsUsageError(t *testing.T) {
	s := startAPIServer(t, nil)
	bad := "{\"s\":\"\xff\"}"
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stdin, arg string }{{"", bad}, {"", "@" + file}, {bad, "@-"}} {
		st, out, errOut := cli(t, c.stdin, "enqueue", "a", "--payload", c.arg, "--key", "k", "--server", s.url)
		if st != exitUsage || !strings.HasPrefix(errOut, "retryq enqueue: --payload: ") || !strings.Contains(errOut, "UTF-8") {
			t.Errorf("enqueue --payload %q: status %d, stderr %q, stdout %q; want %d naming --payload", c.arg, st, errOut, out, exitUsage)
		}
	}
}

// TestCLIErrorForAnHTMLPageNamesItsTitle: an error answer that is an HTML
// page (a proxy's 502, a web server's 404) is described by its title, as
// a page and not the API's: the message used to quote its first line,
// "<html>" or "<!DOCTYPE html>". An HTML page with status 200 is not taken
// for an answer either (status 1, the server named).
func TestCLIErrorForAnHTMLPageNamesItsTitle(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Query().Get("type") {
		case "gateway":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"+
				"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
		case "missing":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "\n<!DOCTYPE HTML>\n<HTML lang=\"en\"><HEAD><TITLE>\n  Page \u00c9 not\x1b[31m found\n</TITLE></HEAD></HTML>")
		case "untitled":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "<html><body>go away</body></html>")
		default:
			_, _ = io.WriteString(w, "<!DOCTYPE html>\n<html><head><title>Welcome</title></head></html>\n")
		}
	}))
	defer srv.Close()
	for typ, want := range map[string]string{
		"gateway":  `the server answered 502 Bad Gateway: an HTML page titled "502 Bad Gateway", not a retryq API answer (HTTP 502 bad_gateway)`,
		"missing":  `the server answered 404 Not Found: an HTML page titled "Page É not found", not a retryq API answer (HTTP 404 not_found)`,
		"untitled": `the server answered 403 Forbidden: an HTML page, not a retryq API answer (HTTP 403 forbidden)`,
		"welcome":  `the server's answer is not the expected JSON`,
	} {
		for _, json := range []bool{false, true} {
			args := []string{"tasks", "list", "--type", typ, "--server", srv.URL}
			if json {
				args = append(args, "--json")
			}
			st, out, errOut := cli(t, "", args...)
			if st != exitFailure || out != "" || !strings.Contains(errOut, want) || strings.Contains(errOut, "\x1b") {
				t.Errorf("retryq %s: status %d\nstdout: %s\nstderr: %q\nwant %d and %q", strings.Join(args, " "), st, out, errOut, exitFailure, want)
			}
		}
	}
}

// closedAddr returns a 127.0.0.1 address nothing listens on (a port just
// taken and given back), where a request is refused at once.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
