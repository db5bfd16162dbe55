package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
)

func init() {
	register(&command{name: "types", summary: "show and configure task types (retry policy, timeout, push target)", run: runTypes, subs: typesSubcommands})
}

const typesUsage = `Usage: retryq types COMMAND [flags]

Shows and stores the configuration of task types: retry policy, timeout
per attempt, default priority and optional push target.
`

// apiTypeConfig is a type's configuration as the API returns it.
type apiTypeConfig struct {
	Type           string         `json:"type"`
	Retry          apiRetryPolicy `json:"retry"`
	TimeoutSeconds float64        `json:"timeout_seconds"`
	Priority       int            `json:"priority"`
	Target         *apiTarget     `json:"target"`
	UpdatedAt      *time.Time     `json:"updated_at"`
	Stored         bool           `json:"stored"`
	// Unreadable is why the server cannot decode the stored configuration
	// (retry is then null).
	Unreadable string `json:"unreadable"`
}

// apiRetryPolicy is the part of a retry policy the CLI shows.
type apiRetryPolicy struct {
	Backoff            string   `json:"backoff"`
	InitialDelay       float64  `json:"initial_delay_seconds"`
	Multiplier         float64  `json:"multiplier"`
	MaxDelay           float64  `json:"max_delay_seconds"`
	MaxDoublings       int      `json:"max_doublings"`
	Jitter             string   `json:"jitter"`
	JitterFraction     float64  `json:"jitter_fraction"`
	MaxAttempts        int      `json:"max_attempts"`
	RetryWindowSeconds float64  `json:"retry_window_seconds"`
	RetryOn            []string `json:"retry_on"`
	NoRetryOn          []string `json:"no_retry_on"`
}

// apiTarget is a push target.
type apiTarget struct {
	URL            string            `json:"url"`
	Method         string            `json:"method"`
	Headers        map[string]string `json:"headers"`
	TimeoutSeconds float64           `json:"timeout_seconds"`
	Concurrency    int               `json:"concurrency"`
}

// backoffLabel summarizes a policy's delays: "exponential 2s×2 up to 10m0s".
func backoffLabel(p *apiRetryPolicy) string {
	var b strings.Builder
	b.WriteString(orDash(p.Backoff))
	b.WriteString(" from " + fmtSeconds(p.InitialDelay))
	if p.Backoff == "exponential" && p.Multiplier != 0 {
		b.WriteString(" ×" + strconv.FormatFloat(p.Multiplier, 'f', -1, 64))
	}
	if p.MaxDelay > 0 {
		b.WriteString(" up to " + fmtSeconds(p.MaxDelay))
	}
	return b.String()
}

// targetLabel names a push target in a table: its method and its URL
// with its secrets masked (engine.RedactURL: the password, query values,
// key-like path segments; as the server's log names it), since tables are pasted into tickets and a
// full-access token is answered with the URL whole. --json keeps it whole.
func targetLabel(t *apiTarget) string {
	if t == nil || t.URL == "" {
		return "-"
	}
	m := t.Method
	if m == "" {
		m = "POST"
	}
	return m + " " + engine.RedactURL(t.URL, "xxxxx")
}

// typesSubcommands are the verbs of "retryq types".
var typesSubcommands = []subcommand{
	{"list", "list the stored type configurations", runTypesList},
	{"get", "show a type's effective configuration", runTypesGet},
	{"set", "store a type's configuration from a JSON file", runTypesSet},
}

func runTypes(ctx context.Context, env *Env, args []string) int {
	return runSubcommand(ctx, env, "types", typesUsage, typesSubcommands, args)
}

const typesListUsage = `Usage: retryq types list [--json]

Lists the stored type configurations. Types never configured use the
server's defaults (see "retryq types get TYPE").
`

func runTypesList(ctx context.Context, env *Env, args []string) int {
	const name = "types list"
	cf, _, st, ok := parseClientArgs(env, name, typesListUsage, args, 0, "")
	if !ok {
		return st
	}
	var out struct {
		Types []apiTypeConfig `json:"types"`
	}
	if st, ok := callAPI(ctx, env, &cf, name, "GET", "/v1/types", nil, nil, &out); !ok {
		return st
	}
	if len(out.Types) == 0 {
		fmt.Fprintln(env.Stdout, "no stored type configurations (every type uses the defaults); store one with: retryq types set TYPE --file policy.json")
		return exitOK
	}
	tb := newTable("TYPE", "BACKOFF", "MAX ATTEMPTS", "RETRY WINDOW", "TIMEOUT", "PRIORITY", "PUSH TARGET").alignRight(2, 5)
	for i := range out.Types {
		t := &out.Types[i]
		window := "-"
		if t.Retry.RetryWindowSeconds > 0 {
			window = fmtSeconds(t.Retry.RetryWindowSeconds)
		}
		timeout := "default"
		if t.TimeoutSeconds > 0 {
			timeout = fmtSeconds(t.TimeoutSeconds)
		}
		backoff, attempts := backoffLabel(&t.Retry), strconv.Itoa(t.Retry.MaxAttempts)
		if t.Unreadable != "" {
			backoff, attempts = "unreadable (see types get)", "-"
		}
		tb.add(t.Type, backoff, attempts, window, timeout,
			strconv.Itoa(t.Priority), fitCell(targetLabel(t.Target), 60))
	}
	tb.write(env.Stdout)
	return exitOK
}

const typesGetUsage = `Usage: retryq types get TYPE [--json]

Shows a type's effective configuration: the stored one, or the server's
defaults for a type never configured. The table names a push target with
the password and query values of its URL masked; --json shows what the
token may see.
`

func runTypesGet(ctx context.Context, env *Env, args []string) int {
	const name = "types get"
	cf, pos, st, ok := parseClientArgs(env, name, typesGetUsage, args, 1, "TYPE")
	if !ok {
		return st
	}
	if err := engine.ValidateType("TYPE", pos[0]); err != nil {
		return usageError(env, name, err.Error())
	}
	var t apiTypeConfig
	if st, ok := callAPI(ctx, env, &cf, name, "GET", "/v1/types/"+typePath(pos[0]), nil, nil, &t); !ok {
		return st
	}
	writeTypeConfig(env.Stdout, &t)
	return exitOK
}

// typePath escapes a type name for /v1/types/{type}, keeping its slashes
// (the route takes the rest of the path).
func typePath(typ string) string {
	parts := strings.Split(typ, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func writeTypeConfig(w io.Writer, t *apiTypeConfig) {
	var f fieldList
	p := &t.Retry
	f.add("Type", t.Type)
	if t.Stored {
		upd := "yes"
		if t.UpdatedAt != nil {
			upd += ", updated " + fmtTime(*t.UpdatedAt)
		}
		f.add("Stored", upd)
	} else {
		f.add("Stored", "no (server defaults)")
	}
	if t.Unreadable != "" {
		// The policy fields are not the stored ones: show why instead.
		f.add("Retry policy", "unreadable by this server: "+cleanCell(t.Unreadable, 300))
		f.add("", "its tasks are held back until a server that can read it runs them, or the type is set again")
		writeTypeRest(&f, t)
		f.write(w)
		return
	}
	f.add("Backoff", backoffLabel(p))
	jit := orDash(p.Jitter)
	if p.Jitter == "proportional" && p.JitterFraction > 0 {
		jit += " ±" + fmtPercent(p.JitterFraction)
	}
	f.add("Jitter", jit)
	if p.MaxDoublings > 0 {
		f.add("Max doublings", strconv.Itoa(p.MaxDoublings))
	}
	f.add("Max attempts", strconv.Itoa(p.MaxAttempts))
	window := "none"
	if p.RetryWindowSeconds > 0 {
		window = fmtSeconds(p.RetryWindowSeconds)
	}
	f.add("Retry window", window)
	if len(p.RetryOn) > 0 {
		f.add("Retry only on", strings.Join(p.RetryOn, ", "))
	}
	if len(p.NoRetryOn) > 0 {
		f.add("Never retry on", strings.Join(p.NoRetryOn, ", "))
	}
	writeTypeRest(&f, t)
	f.write(w)
}

// writeTypeRest adds what follows the retry policy: timeout, priority and
// push target.
func writeTypeRest(f *fieldList, t *apiTypeConfig) {
	timeout := "server default"
	if t.TimeoutSeconds > 0 {
		timeout = fmtSeconds(t.TimeoutSeconds)
	}
	f.add("Timeout", timeout)
	f.add("Priority", strconv.Itoa(t.Priority))
	if t.Target != nil && t.Target.URL != "" {
		tg := targetLabel(t.Target)
		var extra []string
		if t.Target.TimeoutSeconds > 0 {
			extra = append(extra, "timeout "+fmtSeconds(t.Target.TimeoutSeconds))
		}
		if t.Target.Concurrency > 0 {
			extra = append(extra, "concurrency "+strconv.Itoa(t.Target.Concurrency))
		}
		if n := len(t.Target.Headers); n > 0 {
			extra = append(extra, strconv.Itoa(n)+" header(s)")
		}
		if len(extra) > 0 {
			tg += " (" + strings.Join(extra, ", ") + ")"
		}
		f.add("Push target", tg)
	} else {
		f.add("Push target", "none (workers run it)")
	}
}

const typesSetUsage = `Usage: retryq types set TYPE --file policy.json [--json]

Stores (replaces) a type's configuration. The file is the body of
PUT /v1/types/TYPE (use --file - for standard input), for example:

  {"retry": {"backoff": "exponential", "initial_delay_seconds": 2, "multiplier": 2,
             "max_delay_seconds": 600, "jitter": "full", "max_attempts": 8,
             "no_retry_on": ["400", "422"]},
   "timeout_seconds": 30,
   "priority": 10,
   "target": {"url": "https://mailer.internal/send", "timeout_seconds": 10, "concurrency": 8}}

Every field is optional; omitted retry fields take the defaults. The server
validates the file and names the field at fault. To start from the stored
configuration, take "retryq types get TYPE --json" (with a full-access
token: a read-only one shows target secrets as REDACTED) and leave out its
"type", "updated_at" and "stored".
`

// answerOnlyMembers are the members of a type's configuration that the
// API's answers hold and a PUT body may not.
var answerOnlyMembers = map[string]bool{"type": true, "updated_at": true, "stored": true, "unreadable": true}

func runTypesSet(ctx context.Context, env *Env, args []string) int {
	const name = "types set"
	var cf clientFlags
	var file string
	fs := newFlagSet(name, typesSetUsage)
	cf.register(fs, true)
	fs.StringVar(&file, "file", "", "JSON `file` with the configuration (- for standard input); required")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 1, "TYPE"); !ok {
		return st
	}
	if err := engine.ValidateType("TYPE", pos[0]); err != nil {
		return usageError(env, name, err.Error())
	}
	if file == "" {
		return usageError(env, name, "--file: required (the JSON configuration, or - for standard input)")
	}
	src := "@" + file
	if file == "-" {
		src = "@-"
	}
	body, err := readJSONArg(env, "--file", src)
	if isUnreadable(err) {
		return fail(env, name, err)
	}
	if err != nil {
		return usageError(env, name, err.Error())
	}
	if !bytes.HasPrefix(body, []byte("{")) {
		return usageError(env, name, fmt.Sprintf("--file: %s must hold a JSON object such as {\"retry\": {...}, \"timeout_seconds\": 30}", file))
	}
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error())
	}
	defer c.close()
	var t apiTypeConfig
	raw, err := c.call(ctx, "PUT", "/v1/types/"+typePath(pos[0]), nil, body, &t)
	if err != nil {
		var ae *apiCallError
		if errors.As(err, &ae) && ae.Status == 400 && ae.Code == "invalid_field" && answerOnlyMembers[ae.Field] {
			return fail(env, name, fmt.Errorf("%s: %w; it looks like the output of \"retryq types get --json\": "+
				"leave out \"type\", \"updated_at\" and \"stored\", which the answer adds", file, err))
		}
		if isAPIError(err, 400, "") {
			return fail(env, name, fmt.Errorf("%s: %w", file, err))
		}
		return fail(env, name, err)
	}
	if cf.json {
		printJSON(env.Stdout, raw)
		return exitOK
	}
	fmt.Fprintf(env.Stdout, "stored the configuration of %s:\n", cleanCell(t.Type, 0))
	writeTypeConfig(env.Stdout, &t)
	return exitOK
}
