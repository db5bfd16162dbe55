package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary act as the retryq binary: with
// RETRYQ_TEST_CLI=1 in its environment it runs Main on its arguments, so
// tests can run "retryq" as a real process without building it.
func TestMain(m *testing.M) {
	if os.Getenv("RETRYQ_TEST_CLI") == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runMain runs Main in-process with captured output.
func runMain(args ...string) (status int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	status = Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return status, out.String(), errOut.String()
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		args       []string
		status     int
		stdout     string
		stderr     string
		emptyOuput bool
	}{
		{args: nil, status: 2, stderr: "\n  run "},
		{args: []string{"help"}, status: 0, stdout: "\n  run "},
		{args: []string{"--help"}, status: 0, stdout: "Usage:\n  retryq COMMAND"},
		{args: []string{"frobnicate"}, status: 2, stderr: "retryq: unknown command \"frobnicate\""},
		{args: []string{"help", "frobnicate"}, status: 2, stderr: "unknown command"},
		{args: []string{"run", "-h"}, status: 0, stdout: "  --attempts attempts\n"},
		{args: []string{"help", "run"}, status: 0, stdout: "Usage: retryq run [flags] -- COMMAND"},
	}
	for _, tt := range tests {
		status, stdout, stderr := runMain(tt.args...)
		if status != tt.status || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("retryq %q: status %d\nstdout: %s\nstderr: %s", tt.args, status, stdout, stderr)
		}
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	register(&command{name: "run"})
}

// TestHelpDocumentsExitStatuses: scripts branch on the exit status, so
// "retryq help" says what 0, 1 and 2 mean, and that "retryq run" passes its
// command's status through; "retryq help worker" says how the worker exits.
func TestHelpDocumentsExitStatuses(t *testing.T) {
	status, stdout, _ := runMain("help")
	wantOutput(t, "retryq help", stdout, "Exit status:", "\n  0  ", "\n  1  ", "\n  2  ", "retryq help run",
		"With --json a command prints one JSON document on standard output when it\nsucceeds, and nothing there when it fails")
	if status != 0 {
		t.Errorf("retryq help: status %d", status)
	}
	_, stdout, _ = runMain("help", "worker")
	wantOutput(t, "retryq help worker", stdout, "Exit status: 0 ", "1 when the server refuses")
}
