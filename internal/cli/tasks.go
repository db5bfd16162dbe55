package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/engine"
)

func init() {
	register(&command{name: "tasks", summary: "list, inspect, cancel and retry tasks", run: runTasks, subs: tasksSubcommands})
}

const tasksUsage = `Usage: retryq tasks COMMAND [flags]

Lists and inspects the tasks of a retryq server, and cancels or retries
single tasks.
`

// apiTask is a task as the API returns it.
type apiTask struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	State          string          `json:"state"`
	Priority       int             `json:"priority"`
	Attempt        int             `json:"attempt"`
	MaxAttempts    int             `json:"max_attempts"`
	IdempotencyKey string          `json:"idempotency_key"`
	RunAt          time.Time       `json:"run_at"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	LastError      *apiErrorInfo   `json:"last_error"`
	DeadReason     string          `json:"dead_reason"`
	Duplicate      bool            `json:"duplicate"`
	Attempts       []apiAttempt    `json:"attempts"`
}

// apiErrorInfo is an attempt's error.
type apiErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Class   string `json:"class"`
}

func (e *apiErrorInfo) String() string {
	if e == nil {
		return ""
	}
	return strings.TrimSpace(e.Code + " " + e.Message)
}

// apiAttempt is one entry of a task's history.
type apiAttempt struct {
	Number       int           `json:"number"`
	WorkerID     string        `json:"worker_id"`
	StartedAt    time.Time     `json:"started_at"`
	FinishedAt   *time.Time    `json:"finished_at"`
	Outcome      string        `json:"outcome"`
	Error        *apiErrorInfo `json:"error"`
	DelaySeconds float64       `json:"delay_seconds"`
	Detail       string        `json:"detail"`
}

// apiTaskPage is a page of tasks.
type apiTaskPage struct {
	Tasks      []apiTask `json:"tasks"`
	NextCursor *string   `json:"next_cursor"`
}

// taskStates are the states a task can be in.
var taskStates = []string{"scheduled", "pending", "running", "retry_waiting", "succeeded", "dead", "cancelled"}

// stateLabel is a task's state with its dead reason.
func stateLabel(t *apiTask) string {
	if t.State == "dead" && t.DeadReason != "" {
		return "dead (" + t.DeadReason + ")"
	}
	return t.State
}

// attemptsLabel is "2/5", or "2" when the limit is unknown.
func attemptsLabel(t *apiTask) string {
	if t.MaxAttempts > 0 {
		return fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts)
	}
	return strconv.Itoa(t.Attempt)
}

// writeTask prints one task as aligned fields, then its attempt history
// when it has one.
func writeTask(w io.Writer, t *apiTask, now time.Time) {
	var f fieldList
	f.add("ID", t.ID)
	f.add("Type", t.Type)
	f.add("State", stateLabel(t))
	f.add("Attempts", attemptsLabel(t))
	f.add("Priority", strconv.Itoa(t.Priority))
	if t.IdempotencyKey != "" {
		f.add("Idempotency key", t.IdempotencyKey)
	}
	runAt := "Run at"
	switch t.State {
	case "retry_waiting":
		runAt = "Next retry"
	case "succeeded", "dead", "cancelled":
		runAt = "Last due"
	}
	f.add(runAt, fmtTime(t.RunAt)+" ("+fmtRelTime(t.RunAt, now)+")")
	f.add("Created", fmtTime(t.CreatedAt)+" ("+fmtRelTime(t.CreatedAt, now)+")")
	f.add("Updated", fmtTime(t.UpdatedAt)+" ("+fmtRelTime(t.UpdatedAt, now)+")")
	if t.LastError != nil {
		f.add("Last error", fmt.Sprintf("%s: %s [%s]", t.LastError.Code, t.LastError.Message, t.LastError.Class))
	}
	f.add("Payload", fitCell(string(t.Payload), 300))
	f.write(w)
	if len(t.Attempts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nAttempt history:")
	tb := newTable("#", "WORKER", "STARTED", "TOOK", "OUTCOME", "ERROR", "THEN WAITED").alignRight(0, 3)
	for _, a := range t.Attempts {
		took := "-"
		if a.FinishedAt != nil && !a.FinishedAt.IsZero() {
			took = fmtSeconds(a.FinishedAt.Sub(a.StartedAt).Seconds())
		}
		wait := "-"
		if a.DelaySeconds > 0 {
			wait = fmtSeconds(a.DelaySeconds)
		}
		tb.add(strconv.Itoa(a.Number), fitCell(a.WorkerID, 32), fmtTime(a.StartedAt), took, a.Outcome,
			orDash(fitCell(a.Error.String(), 70)), wait)
	}
	tb.write(w)
}

// writeTaskList prints tasks as a table.
func writeTaskList(w io.Writer, ts []apiTask, now time.Time) {
	tb := newTable("ID", "TYPE", "STATE", "ATTEMPTS", "RUN AT", "UPDATED", "LAST ERROR")
	for i := range ts {
		t := &ts[i]
		runAt := "-"
		switch t.State {
		case "scheduled", "pending", "retry_waiting":
			runAt = fmtRelTime(t.RunAt, now)
		}
		tb.add(t.ID, fitCell(t.Type, 32), stateLabel(t), attemptsLabel(t), runAt,
			fmtRelTime(t.UpdatedAt, now), orDash(fitCell(t.LastError.String(), 60)))
	}
	tb.write(w)
}

// tasksSubcommands are the verbs of "retryq tasks".
var tasksSubcommands = []subcommand{
	{"list", "list tasks, newest first, by type and state", runTasksList},
	{"get", "show a task and its attempt history", runTasksGet},
	{"cancel", "cancel a scheduled, pending, retrying or running task", func(ctx context.Context, env *Env, args []string) int {
		return runTaskAction(ctx, env, "cancel", args)
	}},
	{"retry", "put a dead or cancelled task back to pending", func(ctx context.Context, env *Env, args []string) int {
		return runTaskAction(ctx, env, "retry", args)
	}},
}

func runTasks(ctx context.Context, env *Env, args []string) int {
	return runSubcommand(ctx, env, "tasks", tasksUsage, tasksSubcommands, args)
}

const tasksListUsage = `Usage: retryq tasks list [--type T] [--state S[,S...]] [--limit N] [--cursor C] [--json]

Lists tasks, newest first. --state takes one or more of scheduled, pending,
running, retry_waiting (or retrying, as tables call it), succeeded, dead and
cancelled. When more tasks match than the page holds (--limit tasks, or
fewer when their payloads pass the server's 4 MiB bound per page), the
command to see the next page is printed on stderr.
`

func runTasksList(ctx context.Context, env *Env, args []string) int {
	const name = "tasks list"
	var cf clientFlags
	var typ, states, cursor string
	limit := 50
	fs := newFlagSet(name, tasksListUsage)
	cf.register(fs, true)
	fs.StringVar(&typ, "type", "", "only tasks of this `type`")
	fs.StringVar(&states, "state", "", "only tasks in these `states` (comma-separated)")
	intFlag(fs, &limit, "limit", limit, "at most `N` tasks (1..1000)")
	fs.StringVar(&cursor, "cursor", "", "continue after this `cursor` (printed after a full page)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return st
	}
	q := url.Values{}
	if typ != "" {
		if err := engine.ValidateType("--type", typ); err != nil {
			return usageError(env, name, err.Error())
		}
		q.Set("type", typ)
	}
	if states != "" {
		var list []string
		for _, s := range strings.Split(states, ",") {
			s = strings.TrimSpace(s)
			if s == "retrying" {
				s = "retry_waiting"
			}
			if !slices.Contains(taskStates, s) {
				return usageError(env, name, fmt.Sprintf("--state: unknown state %q (want %s)", s, strings.Join(taskStates, ", ")))
			}
			list = append(list, s)
		}
		q.Set("state", strings.Join(list, ","))
	}
	if limit < 1 || limit > 1000 {
		return usageError(env, name, fmt.Sprintf("--limit: must be between 1 and 1000 (got %d)", limit))
	}
	q.Set("limit", strconv.Itoa(limit))
	if msg := checkCursor(cursor); msg != "" {
		return usageError(env, name, msg)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page apiTaskPage
	if st, ok := callAPI(ctx, env, &cf, name, "GET", "/v1/tasks", q, nil, &page); !ok {
		return st
	}
	if len(page.Tasks) == 0 {
		fmt.Fprintln(env.Stdout, "no tasks match")
		return exitOK
	}
	writeTaskList(env.Stdout, page.Tasks, cf.clock.now())
	if page.NextCursor != nil && *page.NextCursor != "" {
		fmt.Fprintf(env.Stderr, "more tasks: %s\n", nextPageCommand("tasks list", args, *page.NextCursor))
	}
	return exitOK
}

// nextPageCommand is the command line that shows the next page: args with
// --cursor replaced, and a --token value hidden (the hint goes to the
// terminal, and often into logs).
func nextPageCommand(name string, args []string, cursor string) string {
	parts := []string{"retryq", name}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--cursor" || a == "-cursor":
			i++
			continue
		case strings.HasPrefix(a, "--cursor=") || strings.HasPrefix(a, "-cursor="):
			continue
		case (a == "--token" || a == "-token") && i+1 < len(args):
			parts = append(parts, a, `"$RETRYQ_API_TOKEN"`)
			i++
			continue
		case strings.HasPrefix(a, "--token=") || strings.HasPrefix(a, "-token="):
			parts = append(parts, a[:strings.IndexByte(a, '=')+1]+`"$RETRYQ_API_TOKEN"`)
			continue
		}
		parts = append(parts, shellQuote(a))
	}
	// The cursor comes from the server: quoted, it cannot reach the
	// terminal as escape sequences.
	return strings.Join(append(parts, "--cursor", shellQuote(cursor)), " ")
}

// shellQuote quotes s for a POSIX shell when it needs it. A string with
// characters a terminal must not receive raw (escape sequences, line
// breaks, bidirectional overrides, invalid UTF-8: an error code reported by
// a worker may hold anything) is written in ANSI-C quoting, $'...' with
// \xHH escapes, which interactive shells (bash, zsh, ksh) read back as
// the same bytes.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	if strings.IndexFunc(s, unprintable) < 0 {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case unprintable(r):
			for _, c := range []byte(s[i : i+size]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('\'')
	return b.String()
}

const tasksGetUsage = `Usage: retryq tasks get ID [--json]

Shows a task: its state, attempts, last error and payload, and the history
of its attempts (worker, start, duration, outcome, error and the delay
chosen after each failure).
`

func runTasksGet(ctx context.Context, env *Env, args []string) int {
	const name = "tasks get"
	cf, pos, st, ok := parseClientArgs(env, name, tasksGetUsage, args, 1, "task ID")
	if !ok {
		return st
	}
	if msg := checkTaskID(pos[0]); msg != "" {
		return usageError(env, name, msg)
	}
	var t apiTask
	if st, ok := callAPI(ctx, env, &cf, name, "GET", "/v1/tasks/"+url.PathEscape(pos[0]), nil, nil, &t); !ok {
		return st
	}
	writeTask(env.Stdout, &t, cf.clock.now())
	return exitOK
}

// checkTaskID rejects what cannot be a task id, before asking the server.
func checkTaskID(id string) string {
	if id == "" || id == "." || id == ".." || len(id) > 64 || strings.ContainsAny(id, "/?# \t\r\n") {
		return fmt.Sprintf("%q is not a task id (ids look like 01HXZ5K3J8T9M2Q4V6W8Y0A1B2)", id)
	}
	return ""
}

// crockfordBase32 is the alphabet of task ids (engine.NewID).
const crockfordBase32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// checkCursor rejects a --cursor value the server cannot have printed, as
// it would: its cursors are task ids, 26 characters of Crockford's base32
// in upper case. Empty is the first page.
func checkCursor(c string) string {
	if c == "" {
		return ""
	}
	ok := len(c) == 26
	for i := 0; ok && i < len(c); i++ {
		ok = strings.IndexByte(crockfordBase32, c[i]) >= 0
	}
	if !ok {
		return fmt.Sprintf("--cursor: %q is not a cursor this server printed (they look like 01HXZ5K3J8T9M2Q4V6W8Y0A1B2: pass the one after \"--cursor\" in the \"more\" line as it is)", fitCell(c, 40))
	}
	return ""
}

const tasksActionUsage = `Usage: retryq tasks %s ID [--json]

%s
`

func runTaskAction(ctx context.Context, env *Env, action string, args []string) int {
	name := "tasks " + action
	doc := "Cancels a scheduled, pending, retry_waiting or running task (a running worker loses its lease)."
	if action == "retry" {
		doc = "Puts a dead or cancelled task back to pending, with its attempt count reset (the history is kept)."
	}
	cf, pos, st, ok := parseClientArgs(env, name, fmt.Sprintf(tasksActionUsage, action, doc), args, 1, "task ID")
	if !ok {
		return st
	}
	if msg := checkTaskID(pos[0]); msg != "" {
		return usageError(env, name, msg)
	}
	var t apiTask
	if st, ok := callAPI(ctx, env, &cf, name, "POST", "/v1/tasks/"+url.PathEscape(pos[0])+"/"+action, nil, nil, &t); !ok {
		return st
	}
	verb := map[string]string{"cancel": "cancelled", "retry": "retried"}[action]
	// The answer's fields are server data, cleaned as table cells are.
	fmt.Fprintf(env.Stdout, "%s task %s (%s), now %s\n", verb, cleanCell(t.ID, 0), cleanCell(t.Type, 0), cleanCell(stateLabel(&t), 0))
	return exitOK
}
