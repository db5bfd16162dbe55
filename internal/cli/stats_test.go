package cli

import (
	"strings"
	"testing"
)

func TestCLIStats(t *testing.T) {
	s := startAPIServer(t, nil)
	if out := s.cliOK(t, "stats"); !strings.Contains(out, "no tasks yet") {
		t.Errorf("stats of an empty server:\n%s", out)
	}
	killTasks(t, s, "pay.charge", "402", 3)
	s.cliOK(t, "enqueue", "mail.send", "--payload", `{"n":1}`)
	out := s.cliOK(t, "stats")
	wantOutput(t, "stats", out, "TYPE", "PENDING", "RETRY RATE", "mail.send", "pay.charge", "TOTAL",
		"3 task(s) in the dead-letter queue: retryq dlq summary", "last 1h0m0s")
	var st apiStatsAnswer
	s.cliJSON(t, &st, "stats")
	if st.Overall.Total != 4 || st.Overall.DLQSize != 3 || st.Overall.Counts["pending"] != 1 || len(st.Types) != 2 {
		t.Errorf("stats --json: %+v", st)
	}
}
