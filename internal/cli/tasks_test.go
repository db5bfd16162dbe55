package cli

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/engine"
)

// TestCLITaskRoundTrip: enqueue, get, list, cancel and retry through the
// CLI, in table and --json form.
func TestCLITaskRoundTrip(t *testing.T) {
	s := startAPIServer(t, nil)

	var task apiTask
	s.cliJSON(t, &task, "enqueue", "email.send", "--payload", `{"to": "a@example.com"}`, "--key", "order-42",
		"--priority", "7", "--max-attempts", "3")
	if task.ID == "" || task.Type != "email.send" || task.State != "pending" || task.Priority != 7 ||
		task.MaxAttempts != 3 || task.IdempotencyKey != "order-42" || compactJSON(t, task.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("enqueue --json: %+v", task)
	}
	// The same key again: the existing task, flagged.
	out := s.cliOK(t, "enqueue", "email.send", "--payload", `{"to":"b@example.com"}`, "--key", "order-42")
	wantOutput(t, "duplicate enqueue", out, "duplicate", task.ID)

	// A delayed task from a payload file, and one from standard input.
	dir := t.TempDir()
	path := dir + "/payload.json"
	writeTestFile(t, path, "{\n  \"report\": 9\n}\n")
	out = s.cliOK(t, "enqueue", "report.build", "--payload", "@"+path, "--delay", "1h")
	wantOutput(t, "delayed enqueue", out, "enqueued report.build", "scheduled", "(in 1h)")
	st, out, errOut := cli(t, `[1,2,3]`, "enqueue", "batch.job", "--payload", "@-", "--server", s.url, "--json")
	if st != 0 || !strings.Contains(out, `"payload": [`) {
		t.Errorf("enqueue --payload @-: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}

	// get: table and JSON.
	out = s.cliOK(t, "tasks", "get", task.ID)
	wantOutput(t, "tasks get", out, "ID", task.ID, "email.send", "pending", "0/3", "order-42", `{"to":"a@example.com"}`)
	var got apiTask
	s.cliJSON(t, &got, "tasks", "get", task.ID)
	if got.ID != task.ID || got.Attempts == nil {
		t.Errorf("tasks get --json: %+v", got)
	}

	// One failed attempt shows up in the history.
	ctx := context.Background()
	ts, err := s.rs.eng.Lease(ctx, engine.LeaseRequest{WorkerID: "mailer-7", Types: []string{"email.send"}})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v %d", err, len(ts))
	}
	if _, err := s.rs.eng.Fail(ctx, ts[0].ID, engine.LeaseToken(&ts[0]), engine.ReportedError{Code: "503", Message: "mailer unavailable"}); err != nil {
		t.Fatal(err)
	}
	out = s.cliOK(t, "tasks", "get", task.ID)
	wantOutput(t, "tasks get after a failure", out, "retry_waiting", "1/3", "Attempt history:", "mailer-7", "failed",
		"503 mailer unavailable", "Last error", "[transient]")

	// list: filters, table, JSON, paging.
	out = s.cliOK(t, "tasks", "list", "--type", "email.send")
	wantOutput(t, "tasks list", out, "ID", "STATE", task.ID, "retry_waiting", "503 mailer unavailable")
	if strings.Contains(out, "report.build") {
		t.Errorf("tasks list --type email.send shows other types:\n%s", out)
	}
	var page apiTaskPage
	s.cliJSON(t, &page, "tasks", "list", "--state", "scheduled,pending")
	if len(page.Tasks) != 2 || page.NextCursor != nil {
		t.Errorf("tasks list --state scheduled,pending --json: %+v", page)
	}
	st, out, errOut = cli(t, "", "tasks", "list", "--limit", "1", "--server", s.url)
	if st != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "more tasks: retryq tasks list --limit 1 --server "+s.url+" --cursor ") {
		t.Errorf("tasks list --limit 1: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	if out := s.cliOK(t, "tasks", "list", "--type", "nothing.here"); !strings.Contains(out, "no tasks match") {
		t.Errorf("empty list: %s", out)
	}

	// cancel, then retry; retrying a pending task is a conflict (exit 1).
	out = s.cliOK(t, "tasks", "cancel", task.ID)
	wantOutput(t, "tasks cancel", out, "cancelled task "+task.ID, "now cancelled")
	var retried apiTask
	s.cliJSON(t, &retried, "tasks", "retry", task.ID)
	if retried.State != "pending" || retried.Attempt != 0 {
		t.Errorf("tasks retry --json: %+v", retried)
	}
	st, _, errOut = cli(t, "", "tasks", "retry", task.ID, "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "retryq tasks retry: ") || !strings.Contains(errOut, "in state pending (HTTP 409 conflict)") {
		t.Errorf("tasks retry of a pending task: status %d, stderr: %s", st, errOut)
	}
	st, _, errOut = cli(t, "", "tasks", "get", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2", "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "HTTP 404 not_found") {
		t.Errorf("tasks get of an unknown id: status %d, stderr: %s", st, errOut)
	}
}

func TestNextPageCommandHidesToken(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "a b", "--cursor", "X", "--limit", "2"}, `retryq tasks list --type 'a b' --limit 2 --cursor NEXT`},
		{[]string{"--token", "s3cret", "--json"}, `retryq tasks list --token "$RETRYQ_API_TOKEN" --json --cursor NEXT`},
		{[]string{"--token=s3cret", "--cursor=X"}, `retryq tasks list --token="$RETRYQ_API_TOKEN" --cursor NEXT`},
		{[]string{"-token", "s3cret"}, `retryq tasks list -token "$RETRYQ_API_TOKEN" --cursor NEXT`},
	} {
		if got := nextPageCommand("tasks list", c.args, "NEXT"); got != c.want {
			t.Errorf("nextPageCommand(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}

// TestEnqueueSaysWhenADelayedTaskRuns: a short delay is said to be one,
// relative to the task's creation on the server's clock. It used to be
// compared with this machine's clock once the answer came back, and a
// task delayed by a second was said to run "now".
func TestEnqueueSaysWhenADelayedTaskRuns(t *testing.T) {
	s := startAPIServer(t, nil)
	for _, c := range []struct{ delay, want string }{{"1s", "(in 1s)"}, {"250ms", "(in 250ms)"}, {"90m", "(in 1h)"}} {
		out := s.cliOK(t, "enqueue", "later", "--delay", c.delay)
		wantOutput(t, "enqueue --delay "+c.delay, out, "scheduled", c.want)
	}
}

// TestDurationFlagsTheAPIRefusesAreUsageErrors: a --delay (enqueue) or
// --older-than (dlq purge) the API would refuse, a positive duration under
// a microsecond or one beyond ten years, is a usage error naming the flag
// (status 2), checked before anything is sent. The server used to refuse
// them, and the command exited 1 naming delay_seconds or
// older_than_seconds, which the user never typed.
func TestDurationFlagsTheAPIRefusesAreUsageErrors(t *testing.T) {
	s := startAPIServer(t, nil)
	killTasks(t, s, "pay.charge", "402", 1) // for purge to ask the API
	for _, v := range []string{"1ns", "0.0000001", "999ns", "87601h", "315360001"} {
		for _, args := range [][]string{
			{"enqueue", "a", "--delay", v},
			{"dlq", "purge", "--older-than", v, "--yes"},
		} {
			flag := args[len(args)-2]
			if args[0] == "dlq" {
				flag = args[2]
			}
			st, out, errOut := cli(t, "", append(args, "--server", s.url)...)
			if st != exitUsage || !strings.Contains(errOut, flag+": ") {
				t.Errorf("retryq %s: status %d, stderr %q, stdout %q; want %d naming %s", strings.Join(args, " "), st, errOut, out, exitUsage, flag)
			}
		}
	}
	// The bounds themselves are taken.
	for _, v := range []string{"87600h", "0.000001", "1us"} {
		s.cliOK(t, "enqueue", "a", "--delay", v)
		s.cliOK(t, "dlq", "purge", "--older-than", v, "--yes")
	}
}

// TestIntegerFlagsAreDecimal: integer flags read decimal numbers only.
// They were read as Go literals: --priority 010 enqueued a task of
// priority 8, and --priority 0x10 one of 16.
func TestIntegerFlagsAreDecimal(t *testing.T) {
	s := startAPIServer(t, nil)
	var task apiTask
	s.cliJSON(t, &task, "enqueue", "a", "--priority", "010")
	if task.Priority != 10 {
		t.Errorf("--priority 010: priority %d, want 10", task.Priority)
	}
	st, _, errOut := cli(t, "", "enqueue", "a", "--priority", "0x10", "--server", s.url)
	if st != exitUsage || !strings.Contains(errOut, "priority") {
		t.Errorf("--priority 0x10: status %d, stderr %q; want %d naming the flag", st, errOut, exitUsage)
	}
}

// TestGarbageCursorIsAUsageError: a --cursor the server cannot have
// printed (its cursors are task ids) is a usage error naming the flag
// (status 2), checked before anything is sent, for tasks list and dlq
// list. It was sent, and the command exited 1 with the server's 400.
func TestGarbageCursorIsAUsageError(t *testing.T) {
	s := startAPIServer(t, nil)
	for _, cur := range []string{"garbage", "01hxz5k3j8t9m2q4v6w8y0a1b2", "01HXZ5K3J8T9M2Q4V6W8Y0A1B", "01HXZ5K3J8T9M2Q4V6W8Y0A1BU", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2 ", "\x1b[31m"} {
		for _, cmd := range [][]string{{"tasks", "list"}, {"dlq", "list"}} {
			st, out, errOut := cli(t, "", append(cmd, "--cursor", cur, "--server", s.url)...)
			if st != exitUsage || !strings.Contains(errOut, "--cursor: ") || strings.Contains(errOut, "HTTP 400") || strings.Contains(errOut, "\x1b") {
				t.Errorf("retryq %s --cursor %q: status %d, stderr %q, stdout %q; want %d naming --cursor",
					strings.Join(cmd, " "), cur, st, errOut, out, exitUsage)
			}
		}
	}
	// A cursor of the right form is taken (here: past the end, no tasks).
	for _, cmd := range [][]string{{"tasks", "list"}, {"dlq", "list"}} {
		s.cliOK(t, append(cmd, "--cursor", "01HXZ5K3J8T9M2Q4V6W8Y0A1B2")...)
	}
}

// TestNextPageCommandQuotesTheCursor: the next page's command line quotes
// the cursor the server sent, so that a foreign answer's cursor cannot
// send escape sequences to the terminal or split the command.
func TestNextPageCommandQuotesTheCursor(t *testing.T) {
	got := nextPageCommand("dlq list", []string{"--limit", "2"}, "X\x1b]0;owned\x07; rm -rf ~")
	if strings.ContainsAny(got, "\x1b\x07") || !strings.HasSuffix(got, `--cursor $'X\x1b]0;owned\x07; rm -rf ~'`) {
		t.Errorf("nextPageCommand with a hostile cursor = %q", got)
	}
	if got := nextPageCommand("dlq list", nil, "01HXZ5K3J8T9M2Q4V6W8Y0A1B2"); got != "retryq dlq list --cursor 01HXZ5K3J8T9M2Q4V6W8Y0A1B2" {
		t.Errorf("nextPageCommand = %q", got)
	}
}

// TestBadTypeFlagIsAUsageError: a --type no task can have is a usage error
// (status 2) of every command with --type, found before the server is
// asked (the server here is a closed port), as the TYPE argument of
// enqueue and types get is.
func TestBadTypeFlagIsAUsageError(t *testing.T) {
	t.Setenv("RETRYQ_SERVER", "")
	closed := "http://" + closedAddr(t)
	tested := 0
	for _, tp := range helpTopics() {
		words := strings.Join(tp, " ")
		if !slices.Contains(helpFlags(t, words), "type") {
			continue
		}
		tested++
		args := append(slices.Clone([]string(tp)), "--type", "bad type", "--yes", "--server", closed)
		if words != "dlq redrive" && words != "dlq purge" {
			args = slices.DeleteFunc(args, func(a string) bool { return a == "--yes" })
		}
		st, out, errOut := cli(t, "", args...)
		if st != exitUsage || out != "" || !strings.Contains(errOut, "--type: may contain only") {
			t.Errorf("retryq %s: status %d\nstdout: %q\nstderr: %s", strings.Join(args, " "), st, out, errOut)
		}
	}
	if tested < 4 {
		t.Errorf("only %d commands with --type found", tested)
	}
}
