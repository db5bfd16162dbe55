package cli

import (
	"strings"
	"testing"
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
