package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

func init() {
	register(&command{name: "stats", summary: "show task counts by type and state, retry rates and the DLQ size", run: runStats})
}

const statsUsage = `Usage: retryq stats [--json]

Shows, per task type and overall, how many tasks are in each state now, and
for the attempts finished in the last hour how many were retries (the retry
rate is retries / attempts). It also says how many finished tasks retention
has deleted since the database was created.
`

// apiStats is one block of GET /v1/stats.
type apiStats struct {
	Type               string         `json:"type"`
	Counts             map[string]int `json:"counts"`
	Total              int            `json:"total"`
	DLQSize            int            `json:"dlq_size"`
	Attempts           int            `json:"attempts"`
	Retries            int            `json:"retries"`
	Failures           int            `json:"failures"`
	RetryRate          float64        `json:"retry_rate"`
	MeanRetriesPerTask *float64       `json:"mean_retries_per_task"`
	RetentionDeleted   map[string]int `json:"retention_deleted"`
}

// apiStatsAnswer is the answer of GET /v1/stats.
type apiStatsAnswer struct {
	WindowSeconds float64    `json:"window_seconds"`
	Overall       apiStats   `json:"overall"`
	Types         []apiStats `json:"types"`
	TypeCount     int        `json:"type_count"`
}

func runStats(ctx context.Context, env *Env, args []string) int {
	const name = "stats"
	cf, _, st, ok := parseClientArgs(env, name, statsUsage, args, 0, "")
	if !ok {
		return st
	}
	var s apiStatsAnswer
	if st, ok := callAPI(ctx, env, &cf, name, "GET", "/v1/stats", nil, nil, &s); !ok {
		return st
	}
	writeStats(env.Stdout, &s)
	return exitOK
}

func writeStats(w io.Writer, s *apiStatsAnswer) {
	rd := s.Overall.RetentionDeleted
	deleted := rd["succeeded"] + rd["cancelled"] + rd["dead"]
	if s.Overall.Total == 0 && s.Overall.Attempts == 0 && deleted == 0 {
		fmt.Fprintln(w, "no tasks yet")
		writeRetentionDeleted(w, rd)
		return
	}
	tb := newTable("TYPE", "SCHEDULED", "PENDING", "RUNNING", "RETRYING", "SUCCEEDED", "DEAD", "CANCELLED",
		"ATTEMPTS", "RETRIES", "RETRY RATE").alignRight(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	row := func(label string, st *apiStats) {
		n := func(state string) string { return strconv.Itoa(st.Counts[state]) }
		tb.add(label, n("scheduled"), n("pending"), n("running"), n("retry_waiting"), n("succeeded"), n("dead"),
			n("cancelled"), strconv.Itoa(st.Attempts), strconv.Itoa(st.Retries), fmtPercent(st.RetryRate))
	}
	for i := range s.Types {
		row(fitCell(s.Types[i].Type, 40), &s.Types[i])
	}
	if len(s.Types) != 1 || s.TypeCount > 1 {
		row("TOTAL", &s.Overall)
	}
	tb.write(w)
	window := time.Duration(s.WindowSeconds * float64(time.Second))
	if window <= 0 {
		window = time.Hour
	}
	fmt.Fprintf(w, "\nStates are current; attempts, retries and the retry rate cover the last %v.\n", window)
	if s.TypeCount > len(s.Types) {
		fmt.Fprintf(w, "%d of %d types shown, those with the most tasks; TOTAL counts them all.\n", len(s.Types), s.TypeCount)
	}
	writeRetentionDeleted(w, rd)
	if s.Overall.DLQSize > 0 {
		fmt.Fprintf(w, "%d task(s) in the dead-letter queue: retryq dlq summary\n", s.Overall.DLQSize)
	}
}

// writeRetentionDeleted says how many tasks retention has deleted, zeros
// included: "0" tells an operator retention has not deleted anything yet,
// which a missing line would leave to guess.
func writeRetentionDeleted(w io.Writer, rd map[string]int) {
	fmt.Fprintf(w, "Retention has deleted %d succeeded, %d cancelled and %d dead task(s) since the database was created.\n",
		rd["succeeded"], rd["cancelled"], rd["dead"])
}
