package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func init() {
	register(&command{name: "enqueue", summary: "add a task to a retryq server", run: runEnqueue})
}

const enqueueUsage = `Usage: retryq enqueue TYPE [--payload JSON|@FILE|@-] [flags]

Adds a task of type TYPE to the server. The payload is inline JSON, @FILE
to read it from a file, or @- to read it from standard input (default null).
With --key, enqueueing the same key again returns the existing task instead
of adding one. --delay or --run-at set the first run time.

Examples:
  retryq enqueue email.send --payload '{"to":"a@example.com"}' --key order-42
  retryq enqueue report.build --payload @report.json --delay 10m --priority 5
`

// enqueueBody is the body of POST /v1/tasks.
type enqueueBody struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	DelaySeconds   *float64        `json:"delay_seconds,omitempty"`
	RunAt          string          `json:"run_at,omitempty"`
	MaxAttempts    int             `json:"max_attempts,omitempty"`
}

func runEnqueue(ctx context.Context, env *Env, args []string) int {
	const name = "enqueue"
	var cf clientFlags
	var payload, key, runAt string
	var delay time.Duration
	var priority, maxAttempts int
	fs := newFlagSet(name, enqueueUsage)
	cf.register(fs, true)
	fs.StringVar(&payload, "payload", "", "task payload: `JSON`, @FILE or @- (standard input)")
	fs.StringVar(&key, "key", "", "idempotency `key` (at most 255 bytes)")
	fs.Var(durationValue{&delay}, "delay", "first run after this `duration`, e.g. 30s or 10m")
	fs.StringVar(&runAt, "run-at", "", "first run at this RFC 3339 `time`, e.g. 2024-05-01T12:00:00Z")
	intFlag(fs, &priority, "priority", 0, "`priority`, -1000000..1000000; higher runs first (default: the type's)")
	intFlag(fs, &maxAttempts, "max-attempts", 0, "attempt `limit` of this task, 1..10000 (default: the type's policy)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 1, "task TYPE"); !ok {
		return st
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	b := enqueueBody{Type: pos[0], IdempotencyKey: key, MaxAttempts: maxAttempts}
	if err := engine.ValidateType("TYPE", b.Type); err != nil {
		return usageError(env, name, err.Error())
	}
	if set["payload"] {
		raw, err := readJSONArg(env, "--payload", payload)
		if isUnreadable(err) {
			return fail(env, name, err)
		}
		if err != nil {
			return usageError(env, name, err.Error())
		}
		b.Payload = raw
	}
	if len(key) > 255 {
		return usageError(env, name, fmt.Sprintf("--key: at most 255 bytes (got %d)", len(key)))
	}
	if set["key"] && key == "" {
		return usageError(env, name, "--key: must not be empty")
	}
	if !store.ValidText(key) {
		// JSON would carry it as U+FFFD: another key than the one given.
		return usageError(env, name, fmt.Sprintf("--key: must be valid UTF-8 text (got %q)", key))
	}
	if set["priority"] {
		if priority < -engine.MaxPriority || priority > engine.MaxPriority {
			return usageError(env, name, fmt.Sprintf("--priority: must be between %d and %d (got %d)", -engine.MaxPriority, engine.MaxPriority, priority))
		}
		b.Priority = &priority
	}
	if set["max-attempts"] && (maxAttempts < 1 || maxAttempts > 10000) {
		return usageError(env, name, fmt.Sprintf("--max-attempts: must be between 1 and 10000 (got %d)", maxAttempts))
	}
	if set["delay"] && set["run-at"] {
		return usageError(env, name, "--delay and --run-at: give one of them, not both")
	}
	if set["delay"] {
		if delay < 0 {
			return usageError(env, name, fmt.Sprintf("--delay: must not be negative (got %v)", delay))
		}
		if msg := apiSecondsProblem("--delay", delay); msg != "" {
			return usageError(env, name, msg)
		}
		s := delay.Seconds()
		b.DelaySeconds = &s
	}
	if set["run-at"] {
		t, err := time.Parse(time.RFC3339Nano, runAt)
		if err != nil {
			return usageError(env, name, fmt.Sprintf("--run-at: want an RFC 3339 time such as 2024-05-01T12:00:00Z, got %q", runAt))
		}
		if y := t.UTC().Year(); y < 1 || y > 9999 {
			// Sent in UTC, it would be a year the server cannot read.
			return usageError(env, name, fmt.Sprintf("--run-at: must lie between years 0001 and 9999 in UTC (got %q)", runAt))
		}
		b.RunAt = t.UTC().Format(time.RFC3339Nano)
	}
	var t apiTask
	if st, ok := callAPI(ctx, env, &cf, name, "POST", "/v1/tasks", nil, b, &t); !ok {
		return st
	}
	if t.Duplicate {
		fmt.Fprintf(env.Stdout, "duplicate: key %q already names task %s (%s); nothing added\n", t.IdempotencyKey, cleanCell(t.ID, 0), cleanCell(stateLabel(&t), 0))
	} else {
		when := "now"
		if t.State == "scheduled" {
			// The delay asked for, exactly; for --run-at, the due time
			// relative to the task's creation, both on the server's
			// clock (this machine's may be off, and a short delay has
			// partly passed by the time the answer arrives).
			d := delay
			if !set["delay"] {
				d = t.RunAt.Sub(t.CreatedAt).Round(time.Second)
			}
			rel := "in " + d.String()
			if d >= time.Minute {
				rel = "in " + fmtAge(d)
			}
			when = fmtTime(t.RunAt) + " (" + rel + ")"
		}
		// The answer's fields are server data, cleaned as table cells are.
		fmt.Fprintf(env.Stdout, "enqueued %s: %s, %s, runs %s\n", cleanCell(t.Type, 0), cleanCell(t.ID, 0), cleanCell(t.State, 0), when)
	}
	return exitOK
}
