package cli

import (
	"strings"
	"testing"
)

// TestDLQSummaryFilterAndLimit: dlq summary takes the filter flags of dlq
// list and a --limit on the groups shown, and always prints the totals of
// every matching group; a redrive counts what its filter selects on the
// server, whatever the number of groups.
func TestDLQSummaryFilterAndLimit(t *testing.T) {
	s := startAPIServer(t, nil)
	killTasks(t, s, "pay.charge", "402", 3)
	killTasks(t, s, "pay.charge", "500", 2)
	killTasks(t, s, "mail.send", "550", 1)

	out := s.cliOK(t, "dlq", "summary", "--limit", "1")
	wantOutput(t, "summary --limit 1", out, "402", "6 dead task(s) in 3 group(s); the 1 largest shown (--limit)")
	if strings.Contains(out, "550") {
		t.Errorf("summary --limit 1 shows more than the largest group:\n%s", out)
	}
	out = s.cliOK(t, "dlq", "summary", "--type", "pay.charge")
	wantOutput(t, "summary --type", out, "402", "500", "5 dead task(s) in 2 group(s)\n")
	if strings.Contains(out, "mail.send") {
		t.Errorf("summary --type pay.charge shows another type:\n%s", out)
	}
	out = s.cliOK(t, "dlq", "summary", "--error-code", "404")
	wantOutput(t, "summary of nothing", out, "no dead task matches (error code 404)")

	st, _, errOut := cli(t, "n\n", "dlq", "redrive", "--error-code", "550", "--server", s.url)
	if st != 1 || !strings.Contains(errOut, "Redrive 1 dead task(s) (error code 550)") {
		t.Errorf("redrive --error-code 550: status %d, stderr %s", st, errOut)
	}
	for _, bad := range []string{"0", "1001"} {
		if st, _, errOut := cli(t, "", "dlq", "summary", "--limit", bad, "--server", s.url); st != 2 || !strings.Contains(errOut, "--limit") {
			t.Errorf("summary --limit %s: status %d, stderr %s", bad, st, errOut)
		}
	}
}
