//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// This file runs the shell commands of README.md's sh blocks (and the
// "retryq ..." code spans of its prose) the way a new user would, in
// order, against a real server: the README's own "retryq server --db
// sqlite:retryq.db" on a temporary directory. Every command is either run
// (readmeRun says what its output must show) or skipped with a reason
// (readmeSkip); a command in neither, or one the parser cannot read, fails
// the test naming its README line.

// readmeCmd is one command of an sh block of README.md.
type readmeCmd struct {
	line   int               // README line the command starts on
	assign map[string]string // NAME=VALUE words before the command
	words  []string          // after quote removal and $NAME expansion
	text   string            // words joined by spaces: the key of the tables below
}

// readmeVars are the shell variables the README's commands use.
var readmeVars = map[string]string{"TOKEN": "readme-token-0123456789abcdef"}

// readmeSkip lists the README commands the test does not run, and why.
var readmeSkip = map[string]string{
	"go run ./cmd/retryq demo": "runs for about a minute with its own server; TestDemo runs it",
	"make test":                "runs every test, this one included",
}

// readmeRun lists the README commands the test runs, each with what its
// standard output (or, for the worker, its standard error) must contain.
var readmeRun = map[string][]string{
	"go run ./cmd/retryq run --attempts 5 --backoff exponential --delay 0.2 --retry-on-exit 75 -- ./examples/flaky.sh": {
		"flaky: run 3: done"},
	"retryq server --db sqlite:retryq.db":                                  nil, // started in-process: the server of the commands below
	"retryq server --db postgres://user@host/retryq --listen 0.0.0.0:7420": nil, // flags checked, not started
	"retryq enqueue ocr.page --payload {\"doc\":\"a.pdf\"} --key a.pdf":    {"enqueued ocr.page: "},
	"retryq worker --types ocr.page --exec ./ocr.sh":                       {"dead (max_attempts)"},
	"retryq dlq summary":                             {"ocr.page", "max_attempts", "1 dead task(s)"},
	"retryq dlq redrive --reason max_attempts --yes": {"redriven 1 dead task(s)"},
	"retryq help":                                    {"Commands:", "worker", "dlq"},
	"retryq help worker":                             {"RETRYQ_TASK_ID", "sh -c"},
	"retryq stats":                                   {"ocr.page", "RETRY RATE"},
	"retryq nodes":                                   {"leader", "ALIVE", "yes"},
}

// readREADMECommands parses the sh blocks of the markdown file at path,
// and the code spans of its prose that start with "retryq ".
func readREADMECommands(path string) ([]readmeCmd, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read readme: %w", err)
	}
	lines := strings.Split(string(raw), "\n")
	var out []readmeCmd
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			// Prose: a code span naming a retryq command is one too.
			for _, m := range regexp.MustCompile("`(retryq [^`]*)`").FindAllStringSubmatch(lines[i], -1) {
				cmds, err := splitREADMELine(m[1], i+1)
				if err != nil {
					return nil, err
				}
				out = append(out, cmds...)
			}
			continue
		}
		if lang == "" {
			return nil, fmt.Errorf("README line %d: a code block without a language", i+1)
		}
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		if j == len(lines) {
			return nil, fmt.Errorf("README line %d: code block never closed", i+1)
		}
		if lang == "sh" {
			for k := i + 1; k < j; k++ {
				cmds, err := splitREADMELine(lines[k], k+1)
				if err != nil {
					return nil, err
				}
				out = append(out, cmds...)
			}
		}
		i = j
	}
	return out, nil
}

// splitREADMELine splits one shell line into commands as sh would for the
// subset the README uses: words, '…' and "…" quotes, $NAME and ${NAME}
// from readmeVars, ; between commands, # comments and leading NAME=VALUE
// assignments. Any other character sh treats specially is an error.
func splitREADMELine(s string, line int) ([]readmeCmd, error) {
	var (
		cmds   []readmeCmd
		words  []string
		word   strings.Builder
		inWord bool
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() error {
		endWord()
		if len(words) == 0 {
			return nil
		}
		c := readmeCmd{line: line, assign: map[string]string{}}
		for len(words) > 0 {
			name, val, ok := strings.Cut(words[0], "=")
			if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name) {
				break
			}
			c.assign[name] = val
			words = words[1:]
		}
		if len(words) == 0 {
			return fmt.Errorf("README line %d: assignments without a command", line)
		}
		c.words, c.text = words, strings.Join(words, " ")
		cmds = append(cmds, c)
		words = nil
		return nil
	}
	expand := func(i int) (int, error) { // s[i] == '$'
		m := regexp.MustCompile(`^\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})`).FindStringSubmatch(s[i:])
		if m == nil {
			return 0, fmt.Errorf("README line %d: a $ that is not $NAME or ${NAME}", line)
		}
		v, ok := readmeVars[m[1]+m[2]]
		if !ok {
			return 0, fmt.Errorf("README line %d: $%s is not a variable the test knows", line, m[1]+m[2])
		}
		word.WriteString(v)
		inWord = true
		return i + len(m[0]), nil
	}
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			endWord()
			i++
		case c == '#' && !inWord:
			i = len(s)
		case c == ';':
			if err := endCmd(); err != nil {
				return nil, err
			}
			i++
		case c == '\'':
			k := strings.IndexByte(s[i+1:], '\'')
			if k < 0 {
				return nil, fmt.Errorf("README line %d: unclosed '", line)
			}
			word.WriteString(s[i+1 : i+1+k])
			inWord = true
			i += k + 2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("README line %d: unclosed \"", line)
				}
				if s[i] == '"' {
					i++
					break
				}
				if s[i] == '\\' || s[i] == '`' {
					return nil, fmt.Errorf("README line %d: %c in double quotes is not read by this test", line, s[i])
				}
				if s[i] == '$' {
					var err error
					if i, err = expand(i); err != nil {
						return nil, err
					}
					continue
				}
				word.WriteByte(s[i])
				i++
			}
		case c == '$':
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
		case strings.IndexByte("&|<>()`*?[\\", c) >= 0:
			return nil, fmt.Errorf("README line %d: %q outside quotes is not read by this test", line, c)
		default:
			word.WriteByte(c)
			inWord = true
			i++
		}
	}
	if err := endCmd(); err != nil {
		return nil, err
	}
	return cmds, nil
}

// TestSplitREADMELineReadsTheShellSubsetOnly checks the README parser: it
// reads quotes, variables, ; and comments as sh does, and names the line
// of anything else sh would treat specially.
func TestSplitREADMELineReadsTheShellSubsetOnly(t *testing.T) {
	cmds, err := splitREADMELine(`A="$TOKEN" retryq x --p '{"a":1}' "b c"; retryq y # z; w`, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[0].assign["A"] != readmeVars["TOKEN"] ||
		cmds[0].text != `retryq x --p {"a":1} b c` || cmds[1].text != "retryq y" || cmds[1].line != 7 {
		t.Fatalf("got %+v", cmds)
	}
	for _, bad := range []string{"retryq a | b", "retryq a > f", "retryq $NOPE", "retryq 'a", "retryq *", "retryq a &"} {
		if _, err := splitREADMELine(bad, 3); err == nil || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%q: err %v, want one naming line 3", bad, err)
		}
	}
}

// TestREADMECommandsRun runs README.md's shell commands in order, as
// described at the top of this file.
func TestREADMECommandsRun(t *testing.T) {
	cmds, err := readREADMECommands("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN", "RETRYQ_READ_TOKEN", "RETRYQ_DB", "RETRYQ_LISTEN"} {
		t.Setenv(k, "")
	}
	// Every command is classified, and every entry of the tables still
	// names a README command, before any is run.
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c.text] = true
		_, skip := readmeSkip[c.text]
		_, run := readmeRun[c.text]
		if !skip && !run {
			t.Errorf("README line %d: %q is neither run nor skipped by this test", c.line, c.text)
		}
	}
	for k := range readmeRun {
		if !seen[k] {
			t.Errorf("readmeRun: %q is not in README.md any more", k)
		}
	}
	for k := range readmeSkip {
		if !seen[k] {
			t.Errorf("readmeSkip: %q is not in README.md any more", k)
		}
	}
	if t.Failed() {
		return
	}

	dir := t.TempDir()
	var srv *runningServer
	var taskID string
	for _, c := range cmds {
		if why, ok := readmeSkip[c.text]; ok {
			t.Logf("README line %d: skipped %q: %s", c.line, c.text, why)
			continue
		}
		wants := readmeRun[c.text]
		words := c.words
		if len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/retryq" {
			words = append([]string{"retryq"}, words[3:]...)
		}
		if words[0] != "retryq" || len(words) < 2 {
			t.Errorf("README line %d: %q is not a retryq command", c.line, c.text)
			continue
		}
		getenv := func(k string) string {
			if v, ok := c.assign[k]; ok {
				return v
			}
			if k == "RETRYQ_SERVER" && srv != nil {
				return "http://" + srv.addr
			}
			return os.Getenv(k)
		}
		var out, errOut bytes.Buffer
		env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: getenv}
		args := words[1:]
		switch args[0] {
		case "server":
			o, st := parseServer(env, args[1:])
			if st != exitOK {
				t.Fatalf("README line %d: %q: status %d\n%s", c.line, c.text, st, errOut.String())
			}
			if !isSQLiteDSN(o.db) {
				continue // a PostgreSQL server elsewhere: its flags parse
			}
			if srv != nil {
				t.Fatalf("README line %d: a second SQLite server", c.line)
			}
			// The commands after it name no --server: they reach it at
			// the client's default address, which must be its own.
			if "http://"+o.listen != defaultServerURL {
				t.Fatalf("README line %d: %q listens on %s; the other commands call %s", c.line, c.text, o.listen, defaultServerURL)
			}
			// Its file and address moved into the test's own.
			o.db = "sqlite:" + filepath.Join(dir, strings.TrimPrefix(o.db, "sqlite:"))
			o.listen, o.logLevel = "127.0.0.1:0", "warn"
			srv, err = startServer(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatalf("README line %d: %q: %v", c.line, c.text, err)
			}
			t.Cleanup(srv.shutdown)
			// A type policy that reaches the DLQ in milliseconds, where the
			// default takes 5 attempts over about 15 s.
			setOut := &bytes.Buffer{}
			setEnv := &Env{Stdout: setOut, Stderr: setOut, Getenv: getenv,
				Stdin: strings.NewReader(`{"retry": {"backoff": "fixed", "initial_delay_seconds": 0.05, "max_attempts": 2}}`)}
			if st := setEnv.dispatch(context.Background(), []string{"types", "set", "ocr.page", "--file", "-"}); st != 0 {
				t.Fatalf("types set ocr.page: status %d\n%s", st, setOut.String())
			}
			continue
		case "run":
			cmd := retryqCmd(t, "../..", args...)
			cmd.Env = append(cmd.Env, "TMPDIR="+dir)
			status, stdout, stderr := runProcess(t, cmd, nil)
			if status != 0 {
				t.Fatalf("README line %d: %q: status %d\nstdout: %s\nstderr: %s", c.line, c.text, status, stdout, stderr)
			}
			wantOutput(t, fmt.Sprintf("README line %d", c.line), stdout, wants...)
			continue
		}
		if srv == nil && args[0] != "help" {
			t.Fatalf("README line %d: %q comes before the README starts a server", c.line, c.text)
		}
		if args[0] == "worker" {
			if taskID == "" {
				t.Fatalf("README line %d: the worker has no task: the README enqueues none before it", c.line)
			}
			script(t, dir, "ocr.sh", "echo \"ocr: cannot read $(cat)\" >&2\nexit 1\n")
			cmd := retryqCmd(t, dir, args...)
			cmd.Env = append(cmd.Env, "RETRYQ_SERVER=http://"+srv.addr)
			status, _, stderr := runProcess(t, cmd, func() {
				waitFor(t, "the worker's task dead", func() bool {
					task, err := srv.eng.Get(context.Background(), taskID)
					return err == nil && task.State == store.StateDead
				})
			})
			if status != 0 {
				t.Fatalf("README line %d: %q stopped by SIGTERM: status %d\nstderr: %s", c.line, c.text, status, stderr)
			}
			wantOutput(t, fmt.Sprintf("README line %d: stderr", c.line), stderr, wants...)
			continue
		}
		if args[0] == "nodes" {
			// The node's row says "leader" once its first election is
			// recorded, which may follow the start by a moment.
			waitFor(t, "the server to show as leader", func() bool {
				var o bytes.Buffer
				e := &Env{Stdin: strings.NewReader(""), Stdout: &o, Stderr: io.Discard, Getenv: getenv}
				return e.dispatch(context.Background(), args) == 0 && strings.Contains(o.String(), "leader")
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		status := env.dispatch(ctx, args)
		cancel()
		if status != 0 {
			t.Fatalf("README line %d: %q: status %d\nstdout: %s\nstderr: %s", c.line, c.text, status, out.String(), errOut.String())
		}
		wantOutput(t, fmt.Sprintf("README line %d", c.line), out.String(), wants...)
		if args[0] == "enqueue" {
			m := regexp.MustCompile(`enqueued ocr\.page: (\S+),`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("README line %d: no task id in %q", c.line, out.String())
			}
			taskID = m[1]
		}
	}
}

// runProcess starts cmd; with during set, it calls during once cmd has
// started, then sends it SIGTERM. It returns cmd's status and output once
// it has exited, failing the test if that takes longer than waitLimit.
func runProcess(t *testing.T, c *exec.Cmd, during func()) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			_ = c.Process.Kill()
			<-done
		}
	}()
	if during != nil {
		during()
		if err := c.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("%q did not finish; stderr:\n%s", c.Args, errOut.String())
	}
	return c.ProcessState.ExitCode(), out.String(), errOut.String()
}
