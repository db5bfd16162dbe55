package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func init() {
	register(&command{name: "dlq", summary: "inspect, redrive and purge the dead-letter queue", run: runDLQ, subs: dlqSubcommands})
}

const dlqUsage = `Usage: retryq dlq COMMAND [flags]

The dead-letter queue holds the tasks that will not be retried any more:
their error was not retryable (non_retryable), they used up their attempts
(max_attempts) or their retry window (retry_window). Fix the cause, then
redrive them (back to pending) or purge them (delete them and their history).
`

// deadReasons are the reasons a task is dead.
var deadReasons = []string{"non_retryable", "max_attempts", "retry_window"}

// defaultDLQBatch is how many tasks one redrive or purge call handles.
const defaultDLQBatch = 500

// dlqSubcommands are the verbs of "retryq dlq".
var dlqSubcommands = []subcommand{
	{"list", "list dead tasks, newest first", runDLQList},
	{"summary", "count dead tasks by type, error code and reason", runDLQSummary},
	{"redrive", "put matching dead tasks back to pending", func(ctx context.Context, env *Env, args []string) int {
		return runDLQBatch(ctx, env, "redrive", args)
	}},
	{"purge", "delete matching dead tasks and their history", func(ctx context.Context, env *Env, args []string) int {
		return runDLQBatch(ctx, env, "purge", args)
	}},
}

func runDLQ(ctx context.Context, env *Env, args []string) int {
	return runSubcommand(ctx, env, "dlq", dlqUsage, dlqSubcommands, args)
}

// dlqFilter is the selection of dead tasks given on the command line.
type dlqFilter struct {
	typ, errorCode, reason, since string
	noErrorCode                   bool
	ids                           []string
	sinceTime                     time.Time
}

func (f *dlqFilter) register(fs *flag.FlagSet, withIDs bool) {
	fs.StringVar(&f.typ, "type", "", "only tasks of this `type`")
	fs.StringVar(&f.errorCode, "error-code", "", "only tasks whose last error has this `code` (e.g. 503, exit:1, timeout)")
	fs.BoolVar(&f.noErrorCode, "no-error-code", false, "only tasks whose last error has no code (the summary's \"-\" rows)")
	fs.StringVar(&f.reason, "reason", "", "only tasks dead for this `reason`: non_retryable, max_attempts or retry_window")
	fs.StringVar(&f.since, "since", "", "only tasks that died at or after this `time`: RFC 3339, or a duration ago such as 1h on the server's clock")
	if withIDs {
		fs.Var(stringsValue{&f.ids}, "id", "only this task `ID`; repeatable")
	}
}

// check validates the filter and returns a message naming the flag at fault.
func (f *dlqFilter) check(now time.Time) string {
	if f.typ != "" {
		if err := engine.ValidateType("--type", f.typ); err != nil {
			return err.Error()
		}
	}
	if len(f.errorCode) > engine.MaxErrorCodeLen {
		return fmt.Sprintf("--error-code: at most %d bytes", engine.MaxErrorCodeLen)
	}
	if !store.ValidText(f.errorCode) {
		return "--error-code: must be valid UTF-8 text without NUL bytes"
	}
	if f.noErrorCode && f.errorCode != "" {
		return "--no-error-code: cannot be combined with --error-code"
	}
	if f.reason != "" && !slices.Contains(deadReasons, f.reason) {
		return fmt.Sprintf("--reason: want one of %s, got %q", strings.Join(deadReasons, ", "), f.reason)
	}
	if f.since != "" {
		t, msg := parseSince("--since", f.since, now)
		if msg != "" {
			return msg
		}
		f.sinceTime = t
	}
	for _, id := range f.ids {
		if msg := checkTaskID(id); msg != "" {
			return "--id: " + msg
		}
	}
	return ""
}

// query is the filter as the query parameters of GET /v1/dlq and
// GET /v1/dlq/summary (its ids aside: they take none).
func (f *dlqFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"type": f.typ, "error_code": f.errorCode, "reason": f.reason, "since": f.sinceRFC3339()} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.noErrorCode {
		q.Set("no_error_code", "true")
	}
	return q
}

// empty reports whether the filter selects every dead task.
func (f *dlqFilter) empty() bool {
	return f.typ == "" && f.errorCode == "" && !f.noErrorCode && f.reason == "" && f.since == "" && len(f.ids) == 0
}

// describe is the filter in words, for confirmations.
func (f *dlqFilter) describe() string {
	var parts []string
	if f.typ != "" {
		parts = append(parts, "type "+f.typ)
	}
	if f.errorCode != "" {
		parts = append(parts, "error code "+f.errorCode)
	}
	if f.noErrorCode {
		parts = append(parts, "no error code")
	}
	if f.reason != "" {
		parts = append(parts, "reason "+f.reason)
	}
	if f.since != "" {
		parts = append(parts, "died since "+fmtTime(f.sinceTime))
	}
	if len(f.ids) > 0 {
		parts = append(parts, strconv.Itoa(len(f.ids))+" listed id(s)")
	}
	if len(parts) == 0 {
		return "all dead tasks"
	}
	return strings.Join(parts, ", ")
}

// resolveSince reads a --since given as a duration ago ("1h") on the
// server's clock, asking c for its time, rather than on this machine's:
// the server stamps a task's death on its own clock and compares the time
// sent with it. check has validated the filter.
func (f *dlqFilter) resolveSince(ctx context.Context, c *apiClient) error {
	if f.since == "" || !isDurationAgo(f.since) {
		return nil
	}
	t, err := sinceOnServer(ctx, c, f.since)
	if err != nil {
		return err
	}
	f.sinceTime = t
	return nil
}

// isDurationAgo reports whether a valid --since value is a duration ago
// rather than an RFC 3339 time.
func isDurationAgo(v string) bool {
	_, err := time.Parse(time.RFC3339Nano, v)
	return err != nil
}

// sinceOnServer is the time a valid --since value names, a duration ago
// taken on the server's clock (c asks the server for its time).
func sinceOnServer(ctx context.Context, c *apiClient, v string) (time.Time, error) {
	if err := c.syncClock(ctx); err != nil {
		return time.Time{}, err
	}
	t, msg := parseSince("--since", v, c.now())
	if msg != "" {
		return time.Time{}, errors.New(msg)
	}
	return t, nil
}

// pinSince returns args with a --since given as a duration ago replaced
// by the time it was resolved to, for the next-page command: run later,
// "1h" would name a later start than the first page's, and the tasks that
// died between the two would be missing from the next pages.
func (f *dlqFilter) pinSince(args []string) []string {
	if f.since == "" || !isDurationAgo(f.since) {
		return args
	}
	v := f.sinceRFC3339()
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		switch a := out[i]; {
		case (a == "--since" || a == "-since") && i+1 < len(out):
			i++
			out[i] = v
		case strings.HasPrefix(a, "--since=") || strings.HasPrefix(a, "-since="):
			out[i] = a[:strings.IndexByte(a, '=')+1] + v
		}
	}
	return out
}

// sinceRFC3339 is the since filter for the API, or "".
func (f *dlqFilter) sinceRFC3339() string {
	if f.since == "" {
		return ""
	}
	return f.sinceTime.UTC().Format(time.RFC3339Nano)
}

// parseSince reads an RFC 3339 time or a duration ago ("24h", "30m").
func parseSince(flagName, v string, now time.Time) (time.Time, string) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		if y := t.UTC().Year(); y < 1 || y > 9999 {
			// Sent in UTC, it would be a year the server cannot read.
			return time.Time{}, fmt.Sprintf("%s: must lie between years 0001 and 9999 in UTC (got %q)", flagName, v)
		}
		return t, ""
	}
	d, err := parseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Sprintf("%s: want an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (24h), got %q", flagName, v)
	}
	return now.Add(-d), ""
}

const dlqListUsage = `Usage: retryq dlq list [--type T] [--error-code C | --no-error-code] [--reason R] [--since T] [--limit N] [--cursor C] [--json]

Lists dead tasks, newest first, with their reason and last error. When
more match than the page holds (--limit tasks, or fewer when their payloads
pass the server's 4 MiB bound per page), the command to see the next page is
printed on stderr.
`

func runDLQList(ctx context.Context, env *Env, args []string) int {
	const name = "dlq list"
	var cf clientFlags
	var f dlqFilter
	var cursor string
	limit := 50
	fs := newFlagSet(name, dlqListUsage)
	cf.register(fs, true)
	f.register(fs, false)
	intFlag(fs, &limit, "limit", limit, "at most `N` tasks (1..1000)")
	fs.StringVar(&cursor, "cursor", "", "continue after this `cursor` (printed after a full page)")
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
	if limit < 1 || limit > 1000 {
		return usageError(env, name, fmt.Sprintf("--limit: must be between 1 and 1000 (got %d)", limit))
	}
	if msg := checkCursor(cursor); msg != "" {
		return usageError(env, name, msg)
	}
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error())
	}
	defer c.close()
	if err := f.resolveSince(ctx, c); err != nil {
		return fail(env, name, err)
	}
	q := f.query()
	q.Set("limit", strconv.Itoa(limit))
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page apiTaskPage
	raw, err := c.call(ctx, "GET", "/v1/dlq", q, nil, &page)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.json {
		printJSON(env.Stdout, raw)
		return exitOK
	}
	if len(page.Tasks) == 0 {
		fmt.Fprintln(env.Stdout, "no dead tasks match")
		return exitOK
	}
	now := c.now()
	tb := newTable("ID", "TYPE", "REASON", "ERROR", "ATTEMPTS", "DIED", "MESSAGE")
	for i := range page.Tasks {
		t := &page.Tasks[i]
		code, msg := "-", "-"
		if t.LastError != nil {
			code, msg = orDash(t.LastError.Code), orDash(t.LastError.Message)
		}
		tb.add(t.ID, fitCell(t.Type, 32), orDash(t.DeadReason), fitCell(code, 24), attemptsLabel(t),
			fmtRelTime(t.UpdatedAt, now), fitCell(msg, 60))
	}
	tb.write(env.Stdout)
	if page.NextCursor != nil && *page.NextCursor != "" {
		fmt.Fprintf(env.Stderr, "more dead tasks: %s\n", nextPageCommand(name, f.pinSince(args), *page.NextCursor))
	}
	return exitOK
}

const dlqBatchUsage = `Usage: retryq dlq %[1]s [--type T] [--error-code C | --no-error-code] [--reason R] [--since T] [--id ID]... %[2]s[--all] [--yes] [--json]

%[3]s

A filter is required (--all selects every dead task). The command says how
many tasks match and asks for confirmation on the terminal unless --yes.
Large selections are handled --batch tasks at a time, with progress on
standard error.
`

func runDLQBatch(ctx context.Context, env *Env, action string, args []string) int {
	name := "dlq " + action
	doc := "Puts matching dead tasks back to pending with their attempt count reset\n(their history is kept)."
	olderUsage := ""
	if action == "purge" {
		doc = "Deletes matching dead tasks and their history."
		olderUsage = "[--older-than D] "
	}
	var cf clientFlags
	var f dlqFilter
	var all, yes bool
	var olderThan time.Duration
	batch := defaultDLQBatch
	fs := newFlagSet(name, fmt.Sprintf(dlqBatchUsage, action, olderUsage, doc))
	cf.register(fs, true)
	f.register(fs, true)
	if action == "purge" {
		fs.Var(durationValue{&olderThan}, "older-than", "only tasks dead for at least this `duration`, e.g. 24h")
	}
	fs.BoolVar(&all, "all", false, "allow an empty filter: every dead task")
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	intFlag(fs, &batch, "batch", batch, "`N` tasks per API call, 1..10000")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return st
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	now := time.Now()
	if msg := f.check(now); msg != "" {
		return usageError(env, name, msg)
	}
	if set["older-than"] && olderThan < 0 {
		return usageError(env, name, fmt.Sprintf("--older-than: must not be negative (got %v)", olderThan))
	}
	if msg := apiSecondsProblem("--older-than", olderThan); msg != "" {
		return usageError(env, name, msg)
	}
	if batch < 1 || batch > 10000 {
		return usageError(env, name, fmt.Sprintf("--batch: must be between 1 and 10000 (got %d)", batch))
	}
	if f.empty() && !set["older-than"] && !all {
		return usageError(env, name, fmt.Sprintf("refusing to %s every dead task: give a filter (--type, --error-code, --no-error-code, --reason, --since, --id%s) or --all",
			action, map[bool]string{true: ", --older-than"}[action == "purge"]))
	}
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error())
	}
	defer c.close()
	if err := f.resolveSince(ctx, c); err != nil {
		return fail(env, name, err)
	}

	var total int
	if len(f.ids) > 0 {
		total = len(f.ids)
	} else {
		// The server counts the filter's tasks: the summary's total covers
		// every matching group, however many there are.
		s, _, err := fetchDLQSummary(ctx, c, &f, 1)
		if err != nil {
			return fail(env, name, err)
		}
		total = s.Total
	}
	what := f.describe()
	if set["older-than"] {
		what += ", dead for at least " + olderThan.String()
	}
	result := map[string]string{"redrive": "redriven", "purge": "purged"}[action]
	if total == 0 {
		if cf.json {
			marshalJSON(env.Stdout, map[string]int{result: 0})
		} else {
			fmt.Fprintf(env.Stdout, "no dead tasks match (%s); nothing %s\n", what, result)
		}
		return exitOK
	}
	upTo := ""
	if set["older-than"] || len(f.ids) > 0 {
		upTo = "up to "
	}
	if !yes {
		q := fmt.Sprintf("Redrive %s%d dead task(s) (%s) back to pending?", upTo, total, what)
		if action == "purge" {
			q = fmt.Sprintf("Permanently delete %s%d dead task(s) (%s) and their history?", upTo, total, what)
		}
		if !confirm(env, q) {
			fmt.Fprintf(env.Stderr, "retryq %s: not confirmed; nothing %s (pass --yes to skip the question)\n", name, result)
			return exitFailure
		}
	}

	body := map[string]any{}
	for k, v := range map[string]string{"type": f.typ, "error_code": f.errorCode, "reason": f.reason, "since": f.sinceRFC3339()} {
		if v != "" {
			body[k] = v
		}
	}
	if len(f.ids) > 0 {
		body["ids"] = f.ids
	}
	if f.noErrorCode {
		body["no_error_code"] = true
	}
	if set["older-than"] {
		body["older_than_seconds"] = olderThan.Seconds()
	}
	// Never touch more than the counted tasks: tasks that die again while
	// this runs (a redriven one failing at once) are not picked up twice.
	done := 0
	progress := total > batch
	for i := 0; i <= total/batch+1 && done < total; i++ {
		lim := min(batch, total-done)
		body["limit"] = lim
		var out map[string]int
		if _, err := c.call(ctx, "POST", "/v1/dlq/"+action, nil, body, &out); err != nil {
			if done > 0 {
				fmt.Fprintf(env.Stderr, "retryq %s: %s %d of %d before the error\n", name, result, done, total)
			}
			return fail(env, name, err)
		}
		n := out[result]
		done += n
		if progress {
			fmt.Fprintf(env.Stderr, "%s %d/%d…\n", result, done, total)
		}
		if n < lim {
			break
		}
	}
	if cf.json {
		marshalJSON(env.Stdout, map[string]int{result: done})
		return exitOK
	}
	fmt.Fprintf(env.Stdout, "%s %d dead task(s) (%s)\n", result, done, what)
	if action == "redrive" && done > 0 {
		fmt.Fprintln(env.Stdout, "follow them with: retryq stats   or   retryq tasks list --state pending,running,retry_waiting")
	}
	return exitOK
}
