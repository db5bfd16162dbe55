package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/engine"
)

// This file holds what the commands talking to a retryq server share: the
// --server, --token and --json flags and the HTTP client. client_errors.go
// turns error answers and transport failures into one-line messages.

// exitFailure is the exit status of a command the server (or the network)
// failed: an API error, an unreachable server, a refused confirmation.
const exitFailure = 1

// defaultServerURL is the API address when --server and RETRYQ_SERVER are unset.
const defaultServerURL = "http://127.0.0.1:7420"

// requestTimeout bounds one API call (long polls wait at most 30s).
const requestTimeout = 60 * time.Second

// maxResponseBytes bounds how much of an answer is read.
const maxResponseBytes = 64 << 20

// clientFlags are the flags of the commands that call the API.
type clientFlags struct {
	server string
	token  string
	json   bool
	// clock is the server's clock as the answers to the clients made by
	// client tell it, for the relative times a command prints (nil until
	// client is called: this machine's clock).
	clock *serverClock
}

// register adds --server and --token, and --json when withJSON.
func (f *clientFlags) register(fs *flag.FlagSet, withJSON bool) {
	fs.StringVar(&f.server, "server", "", "retryq server `URL` (env RETRYQ_SERVER; default "+defaultServerURL+")")
	fs.StringVar(&f.token, "token", "", "API bearer `token` (env RETRYQ_API_TOKEN)")
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print the API's JSON answer instead of a table (for scripts)")
	}
}

// client returns the API client the flags and environment describe, or an
// error naming the flag at fault.
func (f *clientFlags) client(env *Env) (*apiClient, error) {
	raw := firstNonEmpty(f.server, env.Getenv("RETRYQ_SERVER"), defaultServerURL)
	base, err := normalizeServerURL(raw)
	if err != nil {
		src := "--server"
		if f.server == "" {
			src = "RETRYQ_SERVER"
		}
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	token, tokenSrc := f.token, "--token"
	if token == "" {
		if toks := splitEnv(env.Getenv("RETRYQ_API_TOKEN")); len(toks) > 0 {
			token, tokenSrc = toks[0], "RETRYQ_API_TOKEN"
		}
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, fmt.Errorf("%s: must not contain line breaks", tokenSrc)
	}
	if strings.ContainsFunc(token, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		// HTTP refuses them in a header: the request would fail as if
		// the server could not be reached. The token is not echoed.
		return nil, fmt.Errorf("%s: must not contain control characters", tokenSrc)
	}
	c := newAPIClient(base, token)
	if f.clock == nil {
		f.clock = &serverClock{}
	}
	c.clock = f.clock
	return c, nil
}

// normalizeServerURL accepts "http://host:port", "https://host" or a bare
// "host:port" (taken as http) and returns it without a trailing slash.
func normalizeServerURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	// A URL that may hold a secret (a password, a token in the query) is
	// quoted with it masked: the refusal ends in CI logs.
	quoted := raw
	if strings.ContainsAny(raw, "@?#") {
		quoted = engine.RedactURL(s, "xxxxx")
	}
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		return "", fmt.Errorf("want a server URL without user information (pass the token with --token), got %q", quoted)
	}
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("want a server URL such as %s, got %q", defaultServerURL, quoted)
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits: the dial would fail as if the
		// server could not be reached.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %s is not a TCP port (1..65535) in %q", p, quoted)
		}
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// apiClient calls one retryq server.
type apiClient struct {
	base  string
	token string
	hc    *http.Client
	clock *serverClock // the server's clock, from its answers' Date headers
}

func newAPIClient(base, token string) *apiClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// No redirects: the API answers every route itself, and a redirect
	// (the router cleaning a path) would send the request, body and all,
	// to another resource than the one named.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &apiClient{base: base, token: token, hc: &http.Client{Transport: tr, CheckRedirect: noRedirect}, clock: &serverClock{}}
}

// close releases idle connections.
func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// call sends method path?query with body (JSON-encoded unless nil) and, on
// a 2xx answer, decodes it into out (unless nil) and returns the raw body.
// Error answers become *apiCallError, transport failures *unreachableError.
func (c *apiClient) call(ctx context.Context, method, path string, query url.Values, body, out any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		// Not json.Marshal: it rewrites <, >, &, U+2028 and U+2029 as
		// \u003c and so on, in a task's payload too, which the server
		// then stores and answers as other bytes than the user's.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(body); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = &b
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "retryq-cli/"+Version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	sent := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &unreachableError{server: c.base, err: err}
	}
	defer resp.Body.Close()
	c.clock.observe(resp.Header.Get("Date"), sent, time.Now())
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, &unreachableError{server: c.base, err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, decodeAPIError(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("%s %s: the server's answer is not the expected JSON (%w); is %s a retryq server?",
				method, path, err, c.base)
		}
	}
	return data, nil
}

// fail reports err for command name and returns exitFailure.
func fail(env *Env, name string, err error) int {
	fmt.Fprintf(env.Stderr, "retryq %s: %v\n", name, err)
	return exitFailure
}

// parseClientArgs parses the arguments of command name when it takes only
// the client flags (with --json) and n positional arguments (what names
// them when missing). When ok is false the command is over and status is
// its exit status.
func parseClientArgs(env *Env, name, usage string, args []string, n int, what string) (cf clientFlags, pos []string, status int, ok bool) {
	fs := newFlagSet(name, usage)
	cf.register(fs, true)
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return cf, nil, st, false
	}
	if st, ok := wantArgs(env, name, pos, n, what); !ok {
		return cf, nil, st, false
	}
	return cf, pos, exitOK, true
}

// callAPI sends method path?query with body for command name, with the
// client cf describes, and decodes the answer into out. It returns ok when
// the caller is to print out as text; otherwise the command is over (a bad
// client flag, a failed call, or the answer printed as is for --json) and
// status is its exit status.
func callAPI(ctx context.Context, env *Env, cf *clientFlags, name, method, path string, query url.Values, body, out any) (status int, ok bool) {
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error()), false
	}
	defer c.close()
	raw, err := c.call(ctx, method, path, query, body, out)
	if err != nil {
		return fail(env, name, err), false
	}
	if cf.json {
		printJSON(env.Stdout, raw)
		return exitOK, false
	}
	return exitOK, true
}

// parseArgs parses flags that may come before, between or after the
// positional arguments ("retryq tasks get ID --json") and returns the
// positional ones. Everything after "--" is positional.
func parseArgs(env *Env, fs *flag.FlagSet, args []string) (pos []string, status int, ok bool) {
	for range len(args) + 1 { // each round consumes at least one argument
		if len(args) > 0 && args[0] == "--" {
			return append(pos, args[1:]...), exitOK, true
		}
		if st, ok := parseFlags(env, fs, args); !ok {
			return nil, st, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, exitOK, true
}

// wantArgs checks the number of positional arguments of command name.
func wantArgs(env *Env, name string, pos []string, n int, what string) (int, bool) {
	switch {
	case len(pos) < n:
		return usageError(env, name, "missing "+what), false
	case len(pos) > n:
		return usageError(env, name, fmt.Sprintf("unexpected argument %q", pos[n])), false
	}
	return exitOK, true
}

// subcommand is one verb of a command with verbs ("tasks list").
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, env *Env, args []string) int
}

// runSubcommand dispatches "retryq NAME VERB ..." to the verb.
func runSubcommand(ctx context.Context, env *Env, name, usage string, subs []subcommand, args []string) int {
	var b strings.Builder
	b.WriteString(usage)
	b.WriteString("\nCommands:\n")
	width := 0
	for _, s := range subs {
		width = max(width, len(s.name))
	}
	for _, s := range subs {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, s.name, s.summary)
	}
	fmt.Fprintf(&b, "\nRun \"retryq %s COMMAND -h\" for a command's flags.\n", name)
	if len(args) == 0 {
		_, _ = io.WriteString(env.Stderr, b.String())
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		_, _ = io.WriteString(env.Stdout, b.String())
		return exitOK
	case "help":
		// "retryq types help set" is "retryq help types set".
		return env.help(ctx, append([]string{name}, args[1:]...))
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, env, args[1:])
		}
	}
	return usageError(env, name, fmt.Sprintf("unknown command %q (want %s)", args[0], strings.Join(subNames(subs), ", ")))
}

// subNames returns the names of subs, in order.
func subNames(subs []subcommand) []string {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	return names
}

// printJSON writes a JSON answer indented, for --json.
func printJSON(w io.Writer, raw []byte) {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		_, _ = w.Write(raw)
		return
	}
	b.WriteByte('\n')
	_, _ = w.Write(b.Bytes())
}

// marshalJSON prints v as indented JSON, for --json output built by the CLI.
func marshalJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	_, _ = w.Write(append(b, '\n'))
}

// unreadableError is an input that could not be read (a missing file, a
// directory, a failed read), as opposed to one read and found wrong: a
// command fails with exit status 1 for it, not 2, as "retryq help" says
// of a file that cannot be used.
type unreadableError struct{ err error }

// Error implements error.
func (e *unreadableError) Error() string { return e.err.Error() }

// Unwrap returns the read error.
func (e *unreadableError) Unwrap() error { return e.err }

// isUnreadable reports whether err is an input that could not be read.
func isUnreadable(err error) bool {
	var ue *unreadableError
	return errors.As(err, &ue)
}

// readJSONArg reads a JSON flag value: inline JSON, @FILE, or @- for
// standard input. It returns the compacted document or an error naming
// flag, an *unreadableError when the input could not be read.
func readJSONArg(env *Env, flagName, v string) (json.RawMessage, error) {
	var data []byte
	src := "value"
	switch {
	case v == "@-":
		b, err := io.ReadAll(io.LimitReader(env.Stdin, maxResponseBytes+1))
		if err != nil {
			return nil, &unreadableError{fmt.Errorf("%s: read standard input: %w", flagName, err)}
		}
		if len(b) > maxResponseBytes {
			// Not cut short and then called invalid JSON.
			return nil, fmt.Errorf("%s: standard input is larger than %d bytes", flagName, maxResponseBytes)
		}
		data, src = b, "standard input"
	case strings.HasPrefix(v, "@"):
		b, err := readFileLimited(v[1:])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		data, src = b, v[1:]
	default:
		data = []byte(v)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: %s is empty, want JSON", flagName, src)
	}
	// Decoded as raw JSON for the error's offset: decoded into a Go value,
	// a number float64 cannot hold (1e400) would be refused, though the
	// server takes it and keeps it as given.
	var doc json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s is not valid JSON: %s", flagName, src, jsonErrorText(data, err))
	}
	if !utf8.Valid(data) {
		// encoding/json lets such bytes through; the server refuses them,
		// since answers holding them would not be JSON.
		return nil, fmt.Errorf("%s: %s is not UTF-8 text (it holds bytes that are not), as JSON must be", flagName, src)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return nil, fmt.Errorf("%s: %s is not valid JSON: %s", flagName, src, jsonErrorText(data, err))
	}
	return b.Bytes(), nil
}

// readFileLimited reads a file of at most maxResponseBytes; an error
// opening or reading it is an *unreadableError.
func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &unreadableError{err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResponseBytes+1))
	if err != nil {
		return nil, &unreadableError{err}
	}
	if len(b) > maxResponseBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxResponseBytes)
	}
	return b, nil
}

// jsonErrorText describes a JSON syntax error with its line and column.
func jsonErrorText(data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	line, col := 1, 1
	for i := 0; i < int(se.Offset)-1 && i < len(data); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("%s at line %d, column %d", se.Error(), line, col)
}

// confirm asks question on stderr and reads a y/N answer from stdin.
func confirm(env *Env, question string) bool {
	fmt.Fprintf(env.Stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(io.LimitReader(env.Stdin, 1024)).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(env.Stderr)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
