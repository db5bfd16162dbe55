package cli

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpTopic is one command or verb whose help the tests check: its words
// after "retryq" ("types", "set").
type helpTopic []string

// helpTopics lists every command and every verb of a command with verbs,
// from the registered commands, so that a new one is covered without
// editing the tests.
func helpTopics() []helpTopic {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	var topics []helpTopic
	for _, name := range names {
		topics = append(topics, helpTopic{name})
		for _, s := range commands[name].subs {
			topics = append(topics, helpTopic{name, s.name})
		}
	}
	return topics
}

// TestHelpOfEveryCommandIsItsOwnUsage: "retryq help A B" prints the same
// help as "retryq A B --help" and "retryq A help B", and it is A B's own
// usage, not A's, for every command and verb the CLI has.
func TestHelpOfEveryCommandIsItsOwnUsage(t *testing.T) {
	topics := helpTopics()
	if len(topics) < 20 {
		t.Fatalf("only %d commands and verbs found: %v", len(topics), topics)
	}
	for _, tp := range topics {
		words := strings.Join(tp, " ")
		viaHelp := append([]string{"help"}, tp...)
		status, stdout, stderr := runMain(viaHelp...)
		if status != exitOK || stderr != "" {
			t.Errorf("retryq %s: status %d, stderr %q", strings.Join(viaHelp, " "), status, stderr)
		}
		if want := "Usage: retryq " + words + " "; !strings.HasPrefix(stdout, want) {
			t.Errorf("retryq help %s does not begin with %q:\n%s", words, want, stdout)
		}
		for _, alt := range [][]string{append(slices.Clone([]string(tp)), "--help"), append(slices.Clone([]string(tp)), "-h")} {
			st, out, errOut := runMain(alt...)
			if st != exitOK || errOut != "" || out != stdout {
				t.Errorf("retryq %s (status %d, stderr %q) differs from retryq help %s:\n%s\n---\n%s",
					strings.Join(alt, " "), st, errOut, words, out, stdout)
			}
		}
		if len(tp) == 2 {
			st, out, errOut := runMain(tp[0], "help", tp[1])
			if st != exitOK || errOut != "" || out != stdout {
				t.Errorf("retryq %s help %s (status %d, stderr %q) differs from retryq help %s:\n%s",
					tp[0], tp[1], st, errOut, words, out)
			}
		}
	}
}

// TestHelpOfUnknownCommandIsUsageError: "retryq help" of words that name
// no command or verb is a usage error (status 2) naming them.
func TestHelpOfUnknownCommandIsUsageError(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"help", "foo", "bar"}, `"foo"`},
		{[]string{"help", "types", "bogus"}, `"types bogus"`},
		{[]string{"help", "dlq", "redrive", "extra"}, `"dlq redrive extra"`},
		{[]string{"help", "run", "foo"}, `"run foo"`},
		{[]string{"types", "help", "bogus"}, `"types bogus"`},
	}
	for _, tt := range tests {
		status, stdout, stderr := runMain(tt.args...)
		if status != exitUsage || stdout != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("retryq %s: status %d, stdout %q, stderr %q; want status 2 naming %s",
				strings.Join(tt.args, " "), status, stdout, stderr, tt.want)
		}
	}
	for _, arg := range []string{"help", "-h", "--help"} {
		if status, stdout, _ := runMain("help", arg); status != exitOK || !strings.Contains(stdout, "Commands:") {
			t.Errorf("retryq help %s: status %d\n%s", arg, status, stdout)
		}
	}
}

var (
	// flagMention is a flag named in help text.
	flagMention = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*)`)
	// flagListed is a flag of the "Flags:" list of a help text.
	flagListed = regexp.MustCompile(`(?m)^  --([a-z][a-z0-9-]*)`)
)

// sharedClientFlags are the flags of every command calling the API, which
// their usage lines leave to the "Flags:" list.
var sharedClientFlags = []string{"server", "token"}

// TestUsageTextMatchesFlags: the text above each command's "Flags:" list
// names only flags the command has, and names every flag it has but the
// shared --server and --token, so usage text and flags cannot drift apart.
func TestUsageTextMatchesFlags(t *testing.T) {
	for _, tp := range helpTopics() {
		words := strings.Join(tp, " ")
		_, stdout, _ := runMain(append([]string{"help"}, tp...)...)
		text, list, found := strings.Cut(stdout, "\nFlags:\n")
		if !found {
			if len(tp) == 1 && len(commands[tp[0]].subs) > 0 {
				continue // a command with verbs: the verbs have the flags
			}
			t.Errorf("retryq help %s: no Flags: list:\n%s", words, stdout)
			continue
		}
		var flags []string
		for _, m := range flagListed.FindAllStringSubmatch(list, -1) {
			flags = append(flags, m[1])
		}
		mentioned := map[string]bool{}
		for _, line := range strings.Split(text, "\n") {
			for _, m := range flagMention.FindAllStringSubmatchIndex(line, -1) {
				flag := line[m[2]:m[3]]
				// "retryq server --no-migrate" names another command's flag.
				if other := otherCommand(line[:m[2]], tp[0]); other != "" {
					if !slices.Contains(helpFlags(t, other), flag) {
						t.Errorf("retryq help %s: the usage text names --%s, which is not a flag of retryq %s", words, flag, other)
					}
					continue
				}
				mentioned[flag] = true
				if !slices.Contains(flags, flag) {
					t.Errorf("retryq help %s: the usage text names --%s, which is not a flag of the command", words, flag)
				}
			}
		}
		synopsis, _, _ := strings.Cut(text, "\n")
		if strings.Contains(synopsis, "[flags]") {
			continue // the list of flags is the "Flags:" list
		}
		for _, f := range flags {
			if !mentioned[f] && !slices.Contains(sharedClientFlags, f) {
				t.Errorf("retryq help %s: flag --%s is not named in the usage line %q", words, f, synopsis)
			}
		}
	}
}

// commandRef is a command named in help text.
var commandRef = regexp.MustCompile(`retryq ([a-z]+)`)

// otherCommand returns the command other than self that the last "retryq
// NAME" of before names, or "".
func otherCommand(before, self string) string {
	refs := commandRef.FindAllStringSubmatch(before, -1)
	if len(refs) == 0 {
		return ""
	}
	name := refs[len(refs)-1][1]
	if name == self || commands[name] == nil {
		return ""
	}
	return name
}

// helpFlags returns the flags of the "Flags:" list of "retryq help WORDS"
// ("types set").
func helpFlags(t *testing.T, words string) []string {
	t.Helper()
	_, stdout, _ := runMain(append([]string{"help"}, strings.Fields(words)...)...)
	_, list, _ := strings.Cut(stdout, "\nFlags:\n")
	var flags []string
	for _, m := range flagListed.FindAllStringSubmatch(list, -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// TestJSONOutputIsOneDocumentOrNothing: every command with --json prints
// one valid JSON document on standard output when it succeeds, and
// nothing there when it fails (the message goes to standard error, the
// status is 1), so that a script can pipe it into a JSON reader. The
// commands come from the registered ones: one gaining --json needs its
// arguments below.
func TestJSONOutputIsOneDocumentOrNothing(t *testing.T) {
	s := startAPIServer(t, nil)
	ctx := t.Context()
	enqueued := func() string {
		var task apiTask
		s.cliJSON(t, &task, "enqueue", "json.check", "--payload", `{"n":1}`)
		return task.ID
	}
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeTestFile(t, policy, `{"retry": {"max_attempts": 3}}`)
	args := map[string]func() []string{
		"dlq list":     func() []string { return nil },
		"dlq summary":  func() []string { return nil },
		"dlq redrive":  func() []string { killTasks(t, s, "json.dead", "500", 2); return []string{"--all", "--yes"} },
		"dlq purge":    func() []string { killTasks(t, s, "json.dead", "500", 2); return []string{"--all", "--yes"} },
		"enqueue":      func() []string { return []string{"json.check", "--payload", "{}"} },
		"nodes":        func() []string { return nil },
		"stats":        func() []string { return nil },
		"tasks list":   func() []string { return nil },
		"tasks get":    func() []string { return []string{enqueued()} },
		"tasks cancel": func() []string { return []string{enqueued()} },
		"tasks retry": func() []string {
			id := enqueued()
			if _, err := s.rs.eng.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
			return []string{id}
		},
		"types list": func() []string { return nil },
		"types get":  func() []string { return []string{"json.check"} },
		"types set":  func() []string { return []string{"json.check", "--file", policy} },
		"version":    func() []string { return nil },
	}
	closed := "http://" + closedAddr(t)
	tested := 0
	for _, tp := range helpTopics() {
		words := strings.Join(tp, " ")
		if !slices.Contains(helpFlags(t, words), "json") {
			continue
		}
		mk, ok := args[words]
		if !ok {
			t.Errorf("retryq %s has --json: add its arguments to this test", words)
			continue
		}
		tested++
		cmd := append(append(slices.Clone([]string(tp)), mk()...), "--json")
		if words == "version" { // the one that asks no server
			if st, out, errOut := cli(t, "", cmd...); st != exitOK || !json.Valid([]byte(out)) {
				t.Errorf("retryq %s: status %d, stdout not one JSON document:\n%s\nstderr: %s", strings.Join(cmd, " "), st, out, errOut)
			}
			continue
		}
		st, out, errOut := cli(t, "", append(cmd, "--server", s.url)...)
		if st != exitOK || !json.Valid([]byte(out)) {
			t.Errorf("retryq %s: status %d, stdout not one JSON document:\n%s\nstderr: %s", strings.Join(cmd, " "), st, out, errOut)
		}
		st, out, errOut = cli(t, "", append(cmd, "--server", closed)...)
		if st != exitFailure || out != "" || errOut == "" {
			t.Errorf("retryq %s against a closed port: status %d\nstdout: %q\nstderr: %s", strings.Join(cmd, " "), st, out, errOut)
		}
	}
	if tested < 10 {
		t.Errorf("only %d commands with --json found", tested)
	}
	// An error answer of the server prints nothing on stdout either.
	st, out, errOut := cli(t, "", "tasks", "get", "0195f1a2-7c3e-7000-8000-000000000000", "--json", "--server", s.url)
	if st != exitFailure || out != "" || errOut == "" {
		t.Errorf("tasks get of an unknown task --json: status %d\nstdout: %q\nstderr: %s", st, out, errOut)
	}
}

// TestUsageErrorsPointToTheCommandsHelp: a bad flag or argument of every
// command and verb is a usage error (status 2) naming the command and how
// to see its help, and prints nothing on standard output.
func TestUsageErrorsPointToTheCommandsHelp(t *testing.T) {
	for _, tp := range helpTopics() {
		words := strings.Join(tp, " ")
		status, stdout, stderr := runMain(append(slices.Clone([]string(tp)), "--no-such-flag")...)
		hint := `Run "retryq ` + words + ` -h" for usage.`
		if status != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "retryq "+words+": ") || !strings.Contains(stderr, hint) {
			t.Errorf("retryq %s --no-such-flag: status %d\nstdout: %q\nstderr: %q", words, status, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"migrate", "extra"}, {"server", "extra"}} {
		status, _, stderr := runMain(args...)
		hint := `Run "retryq ` + args[0] + ` -h" for usage.`
		if status != exitUsage || !strings.Contains(stderr, `unexpected argument "extra"`) || !strings.Contains(stderr, hint) {
			t.Errorf("retryq %s: status %d, stderr %q", strings.Join(args, " "), status, stderr)
		}
	}
}

// TestFlagArgumentsAreNamed: no flag of any command shows its argument as
// the flag package's generic "value": the Flags: list names what to give.
func TestFlagArgumentsAreNamed(t *testing.T) {
	generic := regexp.MustCompile(`(?m)^  --[a-z0-9-]+ value$`)
	for _, tp := range helpTopics() {
		_, stdout, _ := runMain(append([]string{"help"}, tp...)...)
		for _, line := range generic.FindAllString(stdout, -1) {
			t.Errorf("retryq help %s: %q names no argument", strings.Join(tp, " "), line)
		}
	}
}
