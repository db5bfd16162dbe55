package cli

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runServerBriefly runs `retryq server ARGS` expecting it to refuse to
// start. A server that starts anyway is stopped after a few seconds and
// reported, with its log, as an error.
func runServerBriefly(t *testing.T, args ...string) (int, string) {
	t.Helper()
	s := launchServer(t, append([]string{"server"}, args...)...)
	if !s.wait(15 * time.Second) {
		s.stop(t)
		t.Errorf("retryq server %s started instead of refusing; log:\n%s", strings.Join(args, " "), s.stderr.String())
		return s.status, s.stderr.String()
	}
	return s.status, s.stderr.String()
}

// noFile fails the test when path exists: a refused start must not have
// created (or migrated) the database.
func noFile(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("%s: the database file %s was created before the refusal", what, path)
	}
}

// TestServerRefusesDurationsOutOfRange: --lease, --poll-interval and
// --leader-ttl out of their ranges are usage errors (status 2) naming the
// flag, reported before the database is opened. A negative value used to
// fail after the database was migrated, naming the engine's Go field
// (LeaseDuration), and tiny positive values were accepted: --poll-interval
// 1us kept a core busy on an idle server and --leader-ttl 1ms made the
// leadership flap thousands of times a second.
func TestServerRefusesDurationsOutOfRange(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	for i, tc := range []struct{ flag, value string }{
		{"--lease", "-5s"},
		{"--lease", "5ms"},
		{"--lease", "2h"},
		{"--poll-interval", "-1s"},
		{"--poll-interval", "1us"},
		{"--poll-interval", "2h"},
		{"--leader-ttl", "-1s"},
		{"--leader-ttl", "1ms"},
		{"--leader-ttl", "2h"},
	} {
		path := filepath.Join(dir, strings.TrimPrefix(tc.flag, "--")+string(rune('a'+i))+".db")
		what := tc.flag + " " + tc.value
		status, log := runServerBriefly(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", tc.flag, tc.value)
		if status != exitUsage || !strings.Contains(log, tc.flag+": must be between") {
			t.Errorf("%s: status %d, want %d and an error naming the flag; log:\n%s", what, status, exitUsage, log)
		}
		noFile(t, path, what)
	}
	// 0 still takes the default, and the bounds themselves are accepted.
	path := filepath.Join(dir, "bounds.db")
	s := launchServer(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0",
		"--lease", "0", "--poll-interval", "10ms", "--leader-ttl", "1h")
	checkHealthz(t, s.started(t))
	if st := s.stop(t); st != exitOK {
		t.Errorf("server with in-range durations exited with status %d; log:\n%s", st, s.stderr.String())
	}
}

// TestServerRefusesBadTokensBeforeOpeningTheDatabase: a token no request
// could present (surrounding white space), one given both as a
// full-access and a read-only token, or a token variable set to nothing
// but commas and spaces is a usage error naming the flag or environment
// variable it came from, before the database is opened. The last one used
// to start the API without authentication; the others were found after
// the database was opened and migrated (on PostgreSQL a shared one) and
// the engine started, reported as "api config: ReadTokens[0]: ..." with
// status 1.
func TestServerRefusesBadTokensBeforeOpeningTheDatabase(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		args       []string
		env        map[string]string
		wantInLog  string
		wantAbsent string
	}{
		{args: []string{"--api-token", "x", "--read-token", "x"}, wantInLog: "--read-token: is also given as a full-access token"},
		{args: []string{"--api-token", " padded"}, wantInLog: "--api-token: must not start or end with white space"},
		{args: []string{"--read-token", "tab\t"}, wantInLog: "--read-token: must not start or end with white space"},
		{env: map[string]string{"RETRYQ_API_TOKEN": "a,b", "RETRYQ_READ_TOKEN": "c,b"},
			wantInLog: "RETRYQ_READ_TOKEN: is also given as a full-access token", wantAbsent: "c,b"},
		{args: []string{"--api-token", "same"}, env: map[string]string{"RETRYQ_READ_TOKEN": "same"},
			wantInLog: "RETRYQ_READ_TOKEN: is also given as a full-access token"},
		// Set to nothing a request could present: it used to start the API
		// without authentication.
		{env: map[string]string{"RETRYQ_API_TOKEN": " , "}, wantInLog: "RETRYQ_API_TOKEN: holds no token"},
		{env: map[string]string{"RETRYQ_READ_TOKEN": ","}, args: []string{"--api-token", "t"},
			wantInLog: "RETRYQ_READ_TOKEN: holds no token"},
	} {
		clearServerEnv(t)
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		path := filepath.Join(dir, string(rune('a'+i))+".db")
		args := append([]string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0"}, tc.args...)
		status, log := runServerBriefly(t, args...)
		if status != exitUsage || !strings.Contains(log, tc.wantInLog) {
			t.Errorf("case %d: status %d, want %d and %q; log:\n%s", i, status, exitUsage, tc.wantInLog, log)
		}
		if tc.wantAbsent != "" && strings.Contains(log, tc.wantAbsent) {
			t.Errorf("case %d: the log shows the tokens %q:\n%s", i, tc.wantAbsent, log)
		}
		noFile(t, path, "case "+string(rune('0'+i)))
	}
}

// TestServerListenInUseTouchesNoDatabase: a --listen address another
// process holds fails the start with an error naming it, before the
// database is opened. The server used to open and migrate the database,
// register itself in the node registry and compete for the leadership,
// and only then find that it could not listen.
func TestServerListenInUseTouchesNoDatabase(t *testing.T) {
	clearServerEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	path := filepath.Join(t.TempDir(), "q.db")
	status, log := runServerBriefly(t, "--db", "sqlite:"+path, "--listen", ln.Addr().String())
	if status != 1 || !strings.Contains(log, "listen on "+ln.Addr().String()) {
		t.Errorf("listen address in use: status %d, want 1 and an error naming %s; log:\n%s", status, ln.Addr(), log)
	}
	noFile(t, path, "listen in use")
	// A port out of range is refused the same way, tokens or not.
	status, log = runServerBriefly(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:99999", "--api-token", "t")
	if status == exitOK || !strings.Contains(log, "127.0.0.1:99999") {
		t.Errorf("--listen 127.0.0.1:99999: status %d; log:\n%s", status, log)
	}
	noFile(t, path, "port out of range")
}

// TestServerRefusesNodeIDsTheRegistryCannotHold: a --node-id longer than
// 200 bytes, not valid UTF-8 or holding control characters is a usage
// error. A 5000-byte id used to start a node that led the scheduler but
// whose every registry heartbeat failed, so `retryq nodes` never showed
// it; PostgreSQL refuses an id that is not UTF-8 text in the registry and
// the leadership lease alike.
func TestServerRefusesNodeIDsTheRegistryCannotHold(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	for i, id := range []string{strings.Repeat("n", 201), strings.Repeat("n", 5000), "bad\xffutf8", "nul\x00id", "new\nline"} {
		path := filepath.Join(dir, string(rune('a'+i))+".db")
		status, log := runServerBriefly(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--node-id", id)
		if status != exitUsage || !strings.Contains(log, "--node-id: ") {
			t.Errorf("--node-id %.40q: status %d, want %d and an error naming the flag; log:\n%.2000s", id, status, exitUsage, log)
		}
		noFile(t, path, "--node-id "+id[:min(len(id), 40)])
	}
	// Up to 200 bytes of text is a node id.
	path := filepath.Join(dir, "ok.db")
	id := strings.Repeat("é", 100)
	s := launchServer(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--node-id", id)
	addr := s.started(t)
	var body struct{ Nodes []struct{ ID string } }
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; len(body.Nodes) == 0 || body.Nodes[0].ID != id; i++ {
		if time.Now().After(deadline) || i > 400 {
			t.Fatalf("node %q never registered: %+v; log:\n%s", id, body, s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
		getJSON(t, addr, "/v1/nodes", &body)
	}
}

// TestServerHelpNamesNoArgumentForNoMigrate: `retryq server -h` shows
// --no-migrate as the switch it is. Its help quoted `retryq migrate` in
// back quotes, which the flag package reads as the flag's argument name,
// so the help showed "--no-migrate retryq migrate".
func TestServerHelpNamesNoArgumentForNoMigrate(t *testing.T) {
	status, stdout, _ := runMain("server", "-h")
	if status != exitOK || !strings.Contains(stdout, "\n  --no-migrate\n") {
		t.Errorf("server -h: status %d, --no-migrate not shown as a switch:\n%s", status, stdout)
	}
}

// TestServerHelpSaysBothTokenVariablesTakeLists: RETRYQ_API_TOKEN and
// RETRYQ_READ_TOKEN both take comma-separated tokens, and `retryq server
// -h` says so of both (it said it of RETRYQ_API_TOKEN only).
func TestServerHelpSaysBothTokenVariablesTakeLists(t *testing.T) {
	clearServerEnv(t)
	_, help, _ := runMain("server", "-h")
	var stdout strings.Builder
	env := &Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stdout, Getenv: func(k string) string {
		return map[string]string{"RETRYQ_API_TOKEN": "a1,a2", "RETRYQ_READ_TOKEN": "r1,r2"}[k]
	}}
	o, st := parseServer(env, []string{"--db", "sqlite:" + filepath.Join(t.TempDir(), "d.db")})
	if o == nil {
		t.Fatalf("server with token lists in the environment: status %d\n%s", st, stdout.String())
	}
	for _, f := range []struct {
		flag, env string
		got       []string
	}{{"api-token", "RETRYQ_API_TOKEN", o.apiTokens}, {"read-token", "RETRYQ_READ_TOKEN", o.readTokens}} {
		if len(f.got) != 2 {
			t.Errorf("%s with two comma-separated tokens gave %q", f.env, f.got)
		}
		line := regexp.MustCompile(`(?m)^  --` + f.flag + ` .*\n\s+(.*)$`).FindStringSubmatch(help)
		if line == nil || !strings.Contains(line[1], "env "+f.env+", comma-separated") {
			t.Errorf("retryq server -h: --%s does not say %s takes a comma-separated list: %q", f.flag, f.env, line)
		}
	}
}

// TestServerFlagsWinOverEnvironment: a flag given on the command line
// wins over its environment variable, as docs/operations.md says: here
// RETRYQ_LISTEN names an address the server would refuse and
// RETRYQ_API_TOKEN a token it would not accept, and neither is used.
func TestServerFlagsWinOverEnvironment(t *testing.T) {
	clearServerEnv(t)
	t.Setenv("RETRYQ_LISTEN", "0.0.0.0:0")
	t.Setenv("RETRYQ_API_TOKEN", "env-token")
	t.Setenv("RETRYQ_DB", "mysql://nowhere/x")
	path := filepath.Join(t.TempDir(), "q.db")
	s := launchServer(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--api-token", "flag-token")
	addr := s.started(t)
	for tok, want := range map[string]int{"flag-token": 200, "env-token": 401} {
		req, err := http.NewRequest("GET", "http://"+addr+"/v1/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/stats with the %s: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// TestServerRefusesPostgresOnlyFlagsOnSQLite: --no-migrate and --poll-only
// apply to PostgreSQL only; given with a SQLite database (sqlite:PATH, or
// a bare path ending in .db) they are usage errors naming the flag (status
// 2), before the file is created or migrated. They used to be ignored: a
// server started with --no-migrate migrated the file all the same.
func TestServerRefusesPostgresOnlyFlagsOnSQLite(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	for i, tc := range []struct{ flag, db string }{
		{"--no-migrate", "sqlite:"},
		{"--poll-only", "sqlite:"},
		{"--no-migrate", ""}, // a bare path ending in .db
	} {
		path := filepath.Join(dir, string(rune('a'+i))+".db")
		what := tc.flag + " on " + tc.db + path
		status, log := runServerBriefly(t, "--db", tc.db+path, "--listen", "127.0.0.1:0", tc.flag)
		if status != exitUsage || !strings.Contains(log, tc.flag+": applies to PostgreSQL only") {
			t.Errorf("%s: status %d, want %d and an error naming the flag; log:\n%s", what, status, exitUsage, log)
		}
		noFile(t, path, what)
	}
	// From RETRYQ_DB too.
	path := filepath.Join(dir, "env.db")
	t.Setenv("RETRYQ_DB", "sqlite:"+path)
	if status, log := runServerBriefly(t, "--listen", "127.0.0.1:0", "--no-migrate"); status != exitUsage ||
		!strings.Contains(log, "--no-migrate: applies to PostgreSQL only") {
		t.Errorf("--no-migrate with RETRYQ_DB on SQLite: status %d, want %d; log:\n%s", status, exitUsage, log)
	}
	noFile(t, path, "--no-migrate with RETRYQ_DB")
}

// TestServerRefusesMaxLongPollsBelowOne: --max-long-polls 0 or negative is
// a usage error naming the flag, before the database is opened (a cap of 0
// would refuse every waiting lease request).
func TestServerRefusesMaxLongPollsBelowOne(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	for i, v := range []string{"0", "-3"} {
		path := filepath.Join(dir, "polls"+strconv.Itoa(i)+".db")
		status, log := runServerBriefly(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--max-long-polls", v)
		if status != exitUsage || !strings.Contains(log, "--max-long-polls: must be at least 1") {
			t.Errorf("--max-long-polls %s: status %d, want %d and an error naming the flag; log:\n%s", v, status, exitUsage, log)
		}
		noFile(t, path, "--max-long-polls "+v)
	}
}
