package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// TestCLIDLQ: summary and list of dead tasks; redrive refuses without a
// filter, asks for confirmation (and does nothing on "n"), works in batches
// with progress; purge honours --older-than.
func TestCLIDLQ(t *testing.T) {
	s := startAPIServer(t, nil)
	ids := killTasks(t, s, "pay.charge", "402", 7)
	killTasks(t, s, "mail.send", "550", 2)

	out := s.cliOK(t, "dlq", "summary")
	wantOutput(t, "dlq summary", out, "TYPE", "REASON", "pay.charge", "402", "non_retryable", "7", "mail.send", "550",
		"9 dead task(s) in 2 group(s)", "retryq dlq redrive --type pay.charge --error-code 402")
	var sum apiDLQSummary
	s.cliJSON(t, &sum, "dlq", "summary", "--since", "1h")
	if sum.Total != 9 || len(sum.Groups) != 2 {
		t.Errorf("dlq summary --json: %+v", sum)
	}
	s.cliJSON(t, &sum, "dlq", "summary", "--since", "2099-01-01T00:00:00Z")
	if sum.Total != 0 {
		t.Errorf("dlq summary --since in the future: %+v", sum)
	}
	out = s.cliOK(t, "dlq", "list", "--type", "mail.send")
	wantOutput(t, "dlq list", out, "REASON", "non_retryable", "550", "upstream said no", "1/")
	var page apiTaskPage
	s.cliJSON(t, &page, "dlq", "list", "--error-code", "402", "--reason", "non_retryable", "--limit", "1000")
	if len(page.Tasks) != 7 {
		t.Errorf("dlq list --error-code 402 --json: %d tasks", len(page.Tasks))
	}

	// Declined confirmation: nothing happens, exit 1.
	st, out, errOut := cli(t, "n\n", "dlq", "redrive", "--type", "pay.charge", "--server", s.url)
	if st != 1 || out != "" || !strings.Contains(errOut, "Redrive 7 dead task(s) (type pay.charge) back to pending? [y/N]") ||
		!strings.Contains(errOut, "not confirmed; nothing redriven") {
		t.Errorf("dlq redrive answered n: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	// No answer at all (stdin closed) is a no too.
	if st, _, _ := cli(t, "", "dlq", "redrive", "--all", "--server", s.url); st != 1 {
		t.Errorf("dlq redrive --all with no answer: status %d", st)
	}
	s.cliJSON(t, &sum, "dlq", "summary")
	if sum.Total != 9 {
		t.Fatalf("declined redrives changed the DLQ: %+v", sum)
	}

	// Confirmed on stdin, by explicit ids.
	st, out, errOut = cli(t, "y\n", "dlq", "redrive", "--id", ids[0], "--id", ids[1], "--server", s.url)
	if st != 0 || !strings.Contains(out, "redriven 2 dead task(s)") {
		t.Errorf("dlq redrive --id answered y: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	// --yes, in batches of 2 with progress on stderr: the 5 left.
	st, out, errOut = cli(t, "", "dlq", "redrive", "--type", "pay.charge", "--yes", "--batch", "2", "--server", s.url)
	if st != 0 || !strings.Contains(out, "redriven 5 dead task(s) (type pay.charge)") ||
		!strings.Contains(errOut, "redriven 2/5…\nredriven 4/5…\nredriven 5/5…\n") {
		t.Errorf("dlq redrive --yes --batch 2: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	var n map[string]int
	s.cliJSON(t, &n, "dlq", "redrive", "--type", "pay.charge", "--yes")
	if n["redriven"] != 0 {
		t.Errorf("second redrive: %v", n)
	}
	var task apiTask
	s.cliJSON(t, &task, "tasks", "get", ids[3])
	if task.State != "pending" || task.Attempt != 0 || len(task.Attempts) != 1 {
		t.Errorf("redriven task: state %s attempt %d history %d", task.State, task.Attempt, len(task.Attempts))
	}

	// Purge: the tasks died just now, so --older-than 24h matches none.
	s.cliJSON(t, &n, "dlq", "purge", "--type", "mail.send", "--older-than", "24h", "--yes")
	if n["purged"] != 0 {
		t.Errorf("purge --older-than 24h: %v", n)
	}
	st, out, errOut = cli(t, "yes\n", "dlq", "purge", "--all", "--server", s.url)
	if st != 0 || !strings.Contains(errOut, "Permanently delete 2 dead task(s) (all dead tasks) and their history?") ||
		!strings.Contains(out, "purged 2 dead task(s)") {
		t.Errorf("dlq purge --all: status %d\nstdout: %s\nstderr: %s", st, out, errOut)
	}
	if out := s.cliOK(t, "dlq", "summary"); !strings.Contains(out, "the dead-letter queue is empty") {
		t.Errorf("dlq summary after purge:\n%s", out)
	}
	if out := s.cliOK(t, "dlq", "redrive", "--all", "--yes"); !strings.Contains(out, "no dead tasks match") {
		t.Errorf("redrive of an empty DLQ:\n%s", out)
	}
}

// TestDLQSummaryPrintsNoControlCharacters: error codes are whatever a pull
// worker reported, so one may carry terminal escape sequences. The summary
// prints neither them nor any other control character, in the table or in
// the suggested commands under it.
func TestDLQSummaryPrintsNoControlCharacters(t *testing.T) {
	s := startAPIServer(t, nil)
	code := "E\x1b]0;owned\x07\x1b[2J\r\nrm -rf ~\u202e"
	killTasks(t, s, "pay.charge", code, 1)
	out := s.cliOK(t, "dlq", "summary")
	if i := strings.IndexFunc(out, func(r rune) bool {
		return r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r))
	}); i >= 0 {
		t.Errorf("dlq summary printed control character %q:\n%q", out[i:i+1], out)
	}
	wantOutput(t, "dlq summary", out, "1 dead task(s) in 1 group(s)", "retryq dlq redrive --type pay.charge --error-code ")
}

// exhaustTasks makes n tasks of typ dead for max_attempts (one attempt
// allowed, failed as retryable with code) and returns their ids.
func exhaustTasks(t *testing.T, s *apiServer, typ, code string, n int) []string {
	t.Helper()
	ctx := context.Background()
	reqs := make([]engine.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = engine.EnqueueRequest{Type: typ, Payload: json.RawMessage(`{}`), MaxAttempts: 1}
	}
	if _, err := s.rs.eng.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var ids []string
	yes := true
	for i := 0; i < n+10 && len(ids) < n; i++ {
		ts, err := s.rs.eng.Lease(ctx, engine.LeaseRequest{WorkerID: "exhauster", Types: []string{typ}, Max: n, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for j := range ts {
			out, err := s.rs.eng.Fail(ctx, ts[j].ID, engine.LeaseToken(&ts[j]),
				engine.ReportedError{Code: code, Message: "still failing", Retryable: &yes})
			if err != nil {
				t.Fatal(err)
			}
			if out.State != store.StateDead || out.DeadReason != store.DeadMaxAttempts {
				t.Fatalf("task %s after its only attempt: %s %q", ts[j].ID, out.State, out.DeadReason)
			}
			ids = append(ids, ts[j].ID)
		}
	}
	if len(ids) != n {
		t.Fatalf("exhausted %d of %d tasks", len(ids), n)
	}
	return ids
}

// summaryRedriveHint returns the arguments of the redrive command that
// "dlq summary" suggests for its largest group.
func summaryRedriveHint(t *testing.T, out string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "redrive: retryq "); ok {
			if i := strings.Index(rest, "  "); i >= 0 {
				rest = rest[:i] // a note follows the command
			}
			return strings.Fields(rest)
		}
	}
	t.Fatalf("no redrive hint in:\n%s", out)
	return nil
}

// TestCLIDLQSummaryHintSelectsTheLargestGroup: the redrive command that
// "dlq summary" suggests for its largest group selects that group, not
// every dead task of the type and error code whatever the reason; when the
// group has no error code (no filter can select that alone) the hint says
// how many tasks the command selects.
func TestCLIDLQSummaryHintSelectsTheLargestGroup(t *testing.T) {
	s := startAPIServer(t, nil)
	exhaustTasks(t, s, "ocr.page", "503", 3)
	killTasks(t, s, "ocr.page", "503", 2)

	out := s.cliOK(t, "dlq", "summary")
	args := summaryRedriveHint(t, out)
	st, stdout, errOut := cli(t, "n\n", append(args, "--server", s.url)...)
	if st != 1 || !strings.Contains(errOut, "Redrive 3 dead task(s)") {
		t.Errorf("suggested %q (summary:\n%s): status %d\nstdout: %s\nstderr: %s", args, out, st, stdout, errOut)
	}

	// The largest group now has no error code: --no-error-code selects it
	// alone.
	since := time.Now().UTC().Format(time.RFC3339Nano) // after the 503s died
	exhaustTasks(t, s, "ocr.page", "", 4)
	out = s.cliOK(t, "dlq", "summary")
	args = summaryRedriveHint(t, out)
	st, stdout, errOut = cli(t, "n\n", append(args, "--server", s.url)...)
	if st != 1 || !strings.Contains(errOut, "Redrive 4 dead task(s)") || !slices.Contains(args, "--no-error-code") ||
		strings.Contains(out, "selects") {
		t.Errorf("suggested %q (summary:\n%s): status %d\nstdout: %s\nstderr: %s", args, out, st, stdout, errOut)
	}
	st, stdout, errOut = cli(t, "", "dlq", "list", "--no-error-code", "--error-code", "503", "--server", s.url)
	if st != 2 || !strings.Contains(errOut, "--no-error-code: cannot be combined with --error-code") {
		t.Errorf("--no-error-code with --error-code: status %d\nstdout: %s\nstderr: %s", st, stdout, errOut)
	}
	out = s.cliOK(t, "dlq", "list", "--no-error-code", "--json")
	if n := strings.Count(out, `"id":`); n != 4 || strings.Contains(out, `"503"`) {
		t.Errorf("dlq list --no-error-code: %d tasks\n%s", n, out)
	}

	// A summary read --since suggests commands over the same deaths.
	out = s.cliOK(t, "dlq", "summary", "--since", since)
	args = summaryRedriveHint(t, out)
	st, stdout, errOut = cli(t, "n\n", append(args, "--server", s.url)...)
	if st != 1 || !strings.Contains(errOut, "Redrive 4 dead task(s)") || strings.Contains(out, "selects") {
		t.Errorf("suggested %q (summary --since:\n%s): status %d\nstdout: %s\nstderr: %s", args, out, st, stdout, errOut)
	}
}

// TestDLQSummarySinceWithNothingNewIsNotCalledEmpty: a summary --since
// that counts no task does not say the dead-letter queue is empty, which
// it may not be (it held 2 older dead tasks here).
func TestDLQSummarySinceWithNothingNewIsNotCalledEmpty(t *testing.T) {
	s := startAPIServer(t, nil)
	killTasks(t, s, "pay.charge", "402", 2)
	out := s.cliOK(t, "dlq", "summary", "--since", "2099-01-01T00:00:00Z")
	if strings.Contains(out, "empty") || !strings.Contains(out, "no task died since 2099-01-01") {
		t.Errorf("dlq summary --since in the future, 2 older dead tasks:\n%s", out)
	}
	if out := s.cliOK(t, "dlq", "summary", "--since", "1h"); !strings.Contains(out, "2 dead task(s) in 1 group(s)") {
		t.Errorf("dlq summary --since 1h:\n%s", out)
	}
}

// TestDLQListNextPageKeepsTheSinceWindow: the next-page command that "dlq
// list --since 1h" prints carries the time the first page resolved 1h to,
// not "1h" again: run later, "1h" would name a later start, and tasks that
// died between the two starts would be missing from the next pages.
func TestDLQListNextPageKeepsTheSinceWindow(t *testing.T) {
	s := startAPIServer(t, nil)
	killTasks(t, s, "pay.charge", "402", 2)
	before := time.Now().Add(-time.Hour - time.Minute)
	for _, since := range [][]string{{"--since", "1h"}, {"--since=1h"}, {"-since", "1h"}} {
		args := append([]string{"dlq", "list", "--limit", "1", "--server", s.url}, since...)
		st, out, errOut := cli(t, "", args...)
		line, ok := strings.CutPrefix(strings.TrimSpace(errOut), "more dead tasks: ")
		if st != 0 || !ok || !strings.Contains(out, "pay.charge") {
			t.Fatalf("%q: status %d\nstdout: %s\nstderr: %s", args, st, out, errOut)
		}
		next := strings.Fields(line)
		var got string
		for i, a := range next {
			if v, ok := strings.CutPrefix(a, "--since="); ok {
				got = v
			} else if (a == "--since" || a == "-since") && i+1 < len(next) {
				got = next[i+1]
			}
		}
		at, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || at.Before(before) || at.After(time.Now().Add(-time.Hour+time.Minute)) {
			t.Errorf("%q: next page command %q: --since %q, want the RFC 3339 time 1h before the first page", args, line, got)
			continue
		}
		st, out, errOut = cli(t, "", append(next[1:], "--server", s.url)...)
		if st != 0 || !strings.Contains(out, "pay.charge") || errOut != "" {
			t.Errorf("next page %q: status %d\nstdout: %s\nstderr: %s", next, st, out, errOut)
		}
	}
}
