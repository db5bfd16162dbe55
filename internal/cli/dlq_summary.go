package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// apiDLQSummary is the answer of GET /v1/dlq/summary.
type apiDLQSummary struct {
	Groups []struct {
		Type      string    `json:"type"`
		ErrorCode string    `json:"error_code"`
		Reason    string    `json:"reason"`
		Count     int       `json:"count"`
		Oldest    time.Time `json:"oldest"`
		Newest    time.Time `json:"newest"`
	} `json:"groups"`
	Total      int `json:"total"`       // dead tasks in every matching group
	GroupCount int `json:"group_count"` // matching groups, those past the limit included
}

// fetchDLQSummary reads the summary of the dead tasks f selects (its ids
// aside: the summary takes none), at most limit groups (0: the server's
// default).
func fetchDLQSummary(ctx context.Context, c *apiClient, f *dlqFilter, limit int) (*apiDLQSummary, []byte, error) {
	q := f.query()
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var s apiDLQSummary
	raw, err := c.call(ctx, "GET", "/v1/dlq/summary", q, nil, &s)
	if err != nil {
		return nil, nil, err
	}
	return &s, raw, nil
}

const dlqSummaryUsage = `Usage: retryq dlq summary [--type T] [--error-code C | --no-error-code] [--reason R] [--since T] [--limit N] [--json]

Counts dead tasks by type, error code and reason, largest group first:
what failed, why, and since when. The filter flags are those of
"retryq dlq list"; --since takes an RFC 3339 time or a duration ago (24h)
on the server's clock. Shows the --limit largest groups (default 100, at
most 1000) and the totals of all of them.
`

func runDLQSummary(ctx context.Context, env *Env, args []string) int {
	const name = "dlq summary"
	var cf clientFlags
	var f dlqFilter
	limit := 0
	fs := newFlagSet(name, dlqSummaryUsage)
	cf.register(fs, true)
	f.register(fs, false)
	intFlag(fs, &limit, "limit", limit, "show the `N` largest groups, 1..1000 (default 100)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return st
	}
	if msg := f.check(time.Now()); msg != "" {
		return usageError(env, name, msg)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["limit"] && (limit < 1 || limit > 1000) {
		return usageError(env, name, fmt.Sprintf("--limit: must be between 1 and 1000 (got %d)", limit))
	}
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error())
	}
	defer c.close()
	if err := f.resolveSince(ctx, c); err != nil {
		return fail(env, name, err)
	}
	s, raw, err := fetchDLQSummary(ctx, c, &f, limit)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.json {
		printJSON(env.Stdout, raw)
		return exitOK
	}
	if s.Total == 0 {
		switch {
		case f.typ == "" && f.errorCode == "" && !f.noErrorCode && f.reason == "" && f.since != "":
			// Tasks that died before may be there.
			fmt.Fprintf(env.Stdout, "no task died since %s (dead tasks older than that are not counted)\n", fmtTime(f.sinceTime))
		case !f.empty():
			fmt.Fprintf(env.Stdout, "no dead task matches (%s)\n", f.describe())
		default:
			fmt.Fprintln(env.Stdout, "the dead-letter queue is empty")
		}
		return exitOK
	}
	writeDLQSummary(env, s, f.sinceTime, c.now())
	return exitOK
}

// writeDLQSummary prints the summary (read since the given time, when not
// zero) with ages as of now, and the commands that inspect and redrive its
// largest group.
func writeDLQSummary(env *Env, s *apiDLQSummary, since, now time.Time) {
	tb := newTable("TYPE", "ERROR", "REASON", "COUNT", "OLDEST", "NEWEST").alignRight(3)
	for _, g := range s.Groups {
		tb.add(fitCell(g.Type, 40), fitCell(orDash(g.ErrorCode), 24), g.Reason, strconv.Itoa(g.Count),
			fmtRelTime(g.Oldest, now), fmtRelTime(g.Newest, now))
	}
	tb.write(env.Stdout)
	fmt.Fprintf(env.Stdout, "\n%d dead task(s) in %d group(s)", s.Total, s.GroupCount)
	if len(s.Groups) < s.GroupCount {
		fmt.Fprintf(env.Stdout, "; the %d largest shown (--limit)", len(s.Groups))
	}
	fmt.Fprintln(env.Stdout)
	if len(s.Groups) > 0 {
		// The commands select the largest group by all three of its keys
		// (a group without an error code by --no-error-code).
		g := s.Groups[0]
		f := dlqFilter{typ: g.Type, errorCode: g.ErrorCode, noErrorCode: g.ErrorCode == "", reason: g.Reason}
		cmd := []string{"--type", shellQuote(g.Type)}
		if g.ErrorCode != "" {
			cmd = append(cmd, "--error-code", shellQuote(g.ErrorCode))
		} else {
			cmd = append(cmd, "--no-error-code")
		}
		if g.Reason != "" {
			cmd = append(cmd, "--reason", shellQuote(g.Reason))
		}
		if !since.IsZero() {
			cmd = append(cmd, "--since", since.UTC().Format(time.RFC3339Nano))
		}
		note := ""
		if n := countMatching(s, &f); n != g.Count {
			note = fmt.Sprintf("  (selects %d dead task(s) of every error code: no filter selects only those without one)", n)
		}
		fmt.Fprintf(env.Stdout, "inspect: retryq dlq list %s%s\nredrive: retryq dlq redrive %s%s\n",
			strings.Join(cmd, " "), note, strings.Join(cmd, " "), note)
	}
}

// countMatching counts the dead tasks the filter selects, from the summary
// (ids: their number, an upper bound).
func countMatching(s *apiDLQSummary, f *dlqFilter) int {
	if len(f.ids) > 0 {
		return len(f.ids)
	}
	n := 0
	for _, g := range s.Groups {
		if (f.typ == "" || g.Type == f.typ) && (f.errorCode == "" || g.ErrorCode == f.errorCode) &&
			(!f.noErrorCode || g.ErrorCode == "") && (f.reason == "" || g.Reason == f.reason) {
			n += g.Count
		}
	}
	return n
}
