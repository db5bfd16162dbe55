package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

func TestCLIStats(t *testing.T) {
	s := startAPIServer(t, nil)
	// The help promises the retention count: a fresh server says 0.
	wantOutput(t, "stats of an empty server", s.cliOK(t, "stats"), "no tasks yet",
		"Retention has deleted 0 succeeded, 0 cancelled and 0 dead task(s) since the database was created.")
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
	wantOutput(t, "stats before any retention", out,
		"Retention has deleted 0 succeeded, 0 cancelled and 0 dead task(s) since the database was created.")

	// Retention deletes the dead tasks: the DLQ is empty, the deletions show.
	far := time.Now().Add(time.Hour)
	if _, err := s.rs.eng.Store().DeleteFinished(t.Context(), store.RetentionParams{DeadBefore: far}); err != nil {
		t.Fatal(err)
	}
	out = s.cliOK(t, "stats")
	wantOutput(t, "stats after retention", out, "mail.send", "pay.charge",
		"Retention has deleted 0 succeeded, 0 cancelled and 3 dead task(s) since the database was created.")
	if strings.Contains(out, "dead-letter queue") {
		t.Errorf("stats after retention still shows a DLQ:\n%s", out)
	}
	s.cliJSON(t, &st, "stats")
	if st.Overall.RetentionDeleted["dead"] != 3 || st.Overall.DLQSize != 0 {
		t.Errorf("stats --json after retention: %+v", st.Overall)
	}
}
