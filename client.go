package retryq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// Options configures a Client. Zero fields take the documented defaults.
type Options struct {
	Logger *slog.Logger // default: discard
	// NodeID names this process in the node registry and the scheduler's
	// leadership (default: host-pid-random); Version is the application's
	// version, shown in the registry. Both are UTF-8 text without control
	// characters, at most MaxNodeTextBytes.
	NodeID, Version string

	// DefaultPolicy applies to task types with no stored policy, or a zero
	// one (default retry.DefaultPolicy()).
	DefaultPolicy retry.Policy
	// DefaultTimeout is the per-attempt timeout of types with none (default 5m).
	DefaultTimeout time.Duration
	// LeaseDuration of in-process workers, extended by heartbeats (default 30s).
	LeaseDuration time.Duration
	// PollInterval bounds sleeps without wake-ups (default 1s; at least
	// MinPollInterval): each one that ends is a query per idle fetcher.
	PollInterval time.Duration
	// Retention of finished tasks (defaults 24h, 24h, 30 days; negative keeps forever).
	SucceededRetention, CancelledRetention, DeadRetention time.Duration
	// RetentionInterval is how often retention runs (default 1m; at least
	// 10ms).
	RetentionInterval time.Duration
	// NodeRetention is how long the node registry keeps the row of a node
	// no longer seen (default 7 days; at least 1m, so that the rows of live
	// nodes stay; negative keeps them forever).
	NodeRetention time.Duration
	// NoScheduler disables the scheduler loops on this process (another
	// process on the same database runs them).
	NoScheduler bool
	// LeaderTTL is the scheduler leadership lease when several processes
	// share one database (default 10s; at least MinLeaderTTL): a standby
	// takes over within about 1.25 x LeaderTTL of the leader's death.
	LeaderTTL time.Duration
}

// Bounds of Options' durations.
const (
	// MinLeaderTTL is the shortest Options.LeaderTTL. The leader renews its
	// lease every quarter of it, each renewal bounded by that quarter: with
	// a far shorter lease no renewal finishes in time, no process ever
	// leads, and delayed tasks and retries are never run.
	MinLeaderTTL = engine.MinLeaderTTL
	// MinPollInterval is the shortest Options.PollInterval (the server's
	// --poll-interval has the same bound): a far shorter one (1ns, a unit
	// forgotten) keeps the database busy answering idle polls.
	MinPollInterval = engine.MinPollInterval
)

// MaxNodeTextBytes bounds Options.NodeID and Options.Version, as the
// server's --node-id is bounded.
const MaxNodeTextBytes = 200

// checkNodeText refuses, naming field, a NodeID or Version the node
// registry could not store or show.
func checkNodeText(field, v string) error {
	switch {
	case len(v) > MaxNodeTextBytes:
		return &engine.FieldError{Field: field, Message: fmt.Sprintf("is longer than %d bytes (got %d)", MaxNodeTextBytes, len(v))}
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return &engine.FieldError{Field: field, Message: fmt.Sprintf("must be UTF-8 text without control characters (got %q)", v)}
	}
	return nil
}

// MaxPayloadBytes bounds a task's payload as compacted JSON (8 MiB), as in
// the HTTP API: a larger one is refused with ErrInvalid naming the payload.
const MaxPayloadBytes = engine.MaxPayloadBytes

// MaxPayloadDepth bounds how deeply a task's payload nests arrays and
// objects (512), as in the HTTP API: a deeper one is refused with
// ErrInvalid naming the payload, since answers holding it could not be
// read by workers in some languages.
const MaxPayloadDepth = engine.MaxPayloadDepth

// Client enqueues and manages tasks. It also hosts the engine's commit and
// scheduler loops: call Start before use and Close when done. Enqueue and
// Worker.Run need the loops, and return ErrNotStarted before Start. Once
// Close has returned, every method but Counters returns ErrClosed. A nil
// context is an ErrInvalid error naming ctx, whatever the call. Make a
// Client with NewClient: the zero Client is not usable.
type Client struct {
	e *engine.Engine

	mu    sync.Mutex // serializes Start and Close
	state atomic.Int32
}

// The states of a Client.
const (
	clientNew int32 = iota
	clientStarted
	clientClosed
)

// check refuses a nil ctx (errNilContext), then returns ErrClosed once
// the client is closed, and ErrNotStarted before Start when needStart is
// set.
func (c *Client) check(ctx context.Context, needStart bool) error {
	if ctx == nil {
		return errNilContext
	}
	switch c.state.Load() {
	case clientClosed:
		return ErrClosed
	case clientNew:
		if needStart {
			return ErrNotStarted
		}
	}
	return nil
}

// errNilContext refuses a nil context.Context: the calls that take one
// return it, an ErrInvalid error naming ctx, rather than panic somewhere
// below (in database/sql, with its pool's lock held, so that every later
// read of the store hung). Pass context.Background() for no deadline.
var errNilContext = &engine.FieldError{Field: "ctx", Message: "must not be nil (pass context.Background())"}

// NewClient returns a Client over st. Invalid options are ErrInvalid
// errors naming the field.
func NewClient(st store.Store, o Options) (*Client, error) {
	if err := checkNodeText("NodeID", o.NodeID); err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	if err := checkNodeText("Version", o.Version); err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	e, err := engine.New(engine.Config{
		Store: st, Logger: o.Logger, NodeID: o.NodeID, Version: o.Version,
		DefaultPolicy: o.DefaultPolicy, DefaultTimeout: o.DefaultTimeout,
		LeaseDuration: o.LeaseDuration, PollInterval: o.PollInterval,
		SucceededRetention: o.SucceededRetention, CancelledRetention: o.CancelledRetention,
		DeadRetention: o.DeadRetention, NoScheduler: o.NoScheduler,
		RetentionInterval: o.RetentionInterval, LeaderTTL: o.LeaderTTL,
		NodeRetention: o.NodeRetention,
	})
	if err != nil {
		// The engine refuses only its configuration, Options' fields.
		return nil, fmt.Errorf("new client: %w", invalidError{err})
	}
	return &Client{e: e}, nil
}

// Start launches the client's background loops. The loops outlive ctx:
// Close stops them. Start fails once called before ("start client:
// already started", the client still running), or after Close
// (ErrClosed).
func (c *Client) Start(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("start client: %w", errNilContext)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state.Load() {
	case clientClosed:
		return fmt.Errorf("start client: %w", ErrClosed)
	case clientStarted:
		return errors.New("start client: already started")
	}
	if err := c.e.Start(ctx); err != nil {
		return fmt.Errorf("start client: %w", err)
	}
	c.state.Store(clientStarted)
	return nil
}

// Close stops the client's workers still running (as if their contexts
// were cancelled: handlers get their ShutdownGrace, unfinished tasks are
// released), then the background loops after flushing pending commits. It
// does not close the store. Handlers may use the client until they return;
// once Close has returned, the client's methods return ErrClosed. Closing
// again does nothing and returns nil. Do not call Close from a handler: it
// waits for the handler to return, so it returns only once the worker's
// ShutdownGrace and about a second more have passed, with the handler's
// task released (it runs again, the attempt not counted) and what the
// handler returns then dropped.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() == clientClosed {
		return nil
	}
	err := c.e.Close()
	c.state.Store(clientClosed)
	return err
}

// EnqueueOption adjusts one enqueue. Options are made by the With
// functions below; the zero EnqueueOption changes nothing.
type EnqueueOption struct {
	apply func(*engine.EnqueueRequest)
}

func option(f func(*engine.EnqueueRequest)) EnqueueOption { return EnqueueOption{apply: f} }

// WithPriority sets the task's priority, from -1,000,000 to 1,000,000
// (higher runs first). Without it a task takes its type's default priority
// (TypeConfig.Priority, 0 unless set).
func WithPriority(p int) EnqueueOption {
	return option(func(r *engine.EnqueueRequest) { r.Priority = &p })
}

// WithDelay makes the task due d after the enqueue (0: at once). A
// negative d, or a delay given with WithRunAt, is refused with ErrInvalid.
func WithDelay(d time.Duration) EnqueueOption {
	return option(func(r *engine.EnqueueRequest) { r.Delay = d })
}

// WithRunAt makes the task due at t (a time in the past: due at once). t
// must be within years 1 to 9999. t is judged on the engine's clock, which
// on PostgreSQL is the database server's (the engine corrects this node's
// clock by their measured offset): on a node whose clock is off, a t read
// from it is off as much, and WithDelay gives a time relative to now.
// It cannot be combined with WithDelay (ErrInvalid).
func WithRunAt(t time.Time) EnqueueOption {
	return option(func(r *engine.EnqueueRequest) { r.RunAt = t })
}

// WithMaxAttempts overrides the policy's max attempts for this task, from
// 1 to 10,000; 0 leaves them to the type's policy.
func WithMaxAttempts(n int) EnqueueOption {
	return option(func(r *engine.EnqueueRequest) { r.MaxAttempts = n })
}

// WithIdempotencyKey makes enqueue idempotent. While a task holding the key
// exists, in any state (succeeded, dead and cancelled too, and after a
// manual retry or a redrive), an enqueue with the same key inserts nothing
// and returns that task as it stands, with Duplicate set, whatever type and
// payload it was given: keys are shared by all types, and the first task
// wins (compare Task.Type and Task.Payload when that matters). Deleting the
// task (retention of finished tasks, a purge of the dead-letter queue) frees
// the key: a later enqueue with it creates a new task. k is UTF-8 text
// without NUL bytes, at most 255 bytes long; an empty k is no key.
func WithIdempotencyKey(k string) EnqueueOption {
	return option(func(r *engine.EnqueueRequest) { r.IdempotencyKey = k })
}

// EnqueueResult is the result of an enqueue.
type EnqueueResult struct {
	Task      TaskInfo // the task as stored (for a duplicate, the existing task)
	Duplicate bool     // an existing task with the same idempotency key
}

// request builds the engine's request. A payload given as bytes is not
// copied here: the engine compacts every payload into a buffer of its own
// before Enqueue returns, so the caller may reuse its buffer then, while
// the task may still be handed to a local handler straight from the insert
// (Enqueue copies the result's payload then).
func request(typ string, payload any, opts []EnqueueOption) (engine.EnqueueRequest, error) {
	r := engine.EnqueueRequest{Type: typ}
	switch p := payload.(type) {
	case nil:
	case json.RawMessage:
		r.Payload = p
	case []byte:
		r.Payload = p
	default:
		// Not json.Marshal, which writes <, > and & as \u003c and so on:
		// handlers, push targets and HTTP answers get them as they are, as
		// for a payload sent over HTTP.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(payload); err != nil {
			return r, fmt.Errorf("payload: %w: %w", ErrInvalid, err)
		}
		r.Payload = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&r)
		}
	}
	return r, nil // the engine checks the fields (engine.prepare)
}

// Enqueue durably enqueues one task. typ is 1 to 128 bytes of letters,
// digits and _ - . : / with no empty, "." or ".." part between slashes
// ("ocr.page", "billing/invoice:v2"). payload is encoded as JSON, with
// <, > and & left as they are (json.RawMessage and []byte are taken as
// JSON and copied: the caller may reuse them once Enqueue returns, and the
// result's Task is the caller's own). The
// JSON is stored compacted, as the HTTP API stores it: white space between
// tokens is dropped, and numbers, escapes and member order are kept. It
// must be UTF-8 and at most MaxPayloadBytes long once compacted. Invalid
// arguments are ErrInvalid errors naming the field.
//
// When ctx ends before the task's insert was sent to the database, Enqueue
// returns ctx's error and nothing is enqueued; once the insert is under
// way, Enqueue waits for its commit (at most the lease duration) and
// reports its result. Another error can leave it unknown whether the task
// was stored (the connection was lost during the commit): enqueue with an
// idempotency key to be able to try again safely.
func (c *Client) Enqueue(ctx context.Context, typ string, payload any, opts ...EnqueueOption) (EnqueueResult, error) {
	if err := c.check(ctx, true); err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue task: %w", err)
	}
	r, err := request(typ, payload, opts)
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue task: %w", err)
	}
	res, err := c.e.Enqueue(ctx, r)
	if err != nil {
		if fe := goField(enqueueFields, err); fe != nil {
			return EnqueueResult{}, fmt.Errorf("enqueue task: %w", fe)
		}
		return EnqueueResult{}, err // the engine's other errors name the call
	}
	if res.Task.State == StateRunning {
		// Handed to an idle worker straight from the insert, it shares its
		// payload with the task the worker holds: the caller's copy is its
		// own, so that writing into it changes nothing the handler sees.
		res.Task.Payload = bytes.Clone(res.Task.Payload)
	}
	return EnqueueResult{Task: res.Task, Duplicate: res.Duplicate}, nil
}

// NewTask describes one task of EnqueueMany.
type NewTask struct {
	Type    string          // the task type, as for Enqueue
	Payload any             // encoded as Enqueue encodes its payload
	Options []EnqueueOption // the task's options, as for Enqueue
}

// EnqueueMany enqueues a batch of at most 10,000 tasks atomically, in one
// transaction. A task whose idempotency key is taken, by a stored task or
// an earlier task of the batch, is not inserted: its result is that task,
// with Duplicate set. Payloads and options are taken as Enqueue takes
// them; an invalid task (named tasks[i]), or an empty or larger batch, is
// an ErrInvalid error, and nothing is enqueued.
//
// When ctx has ended before the batch's insert was sent to the database,
// EnqueueMany returns ctx's error and nothing is enqueued. Unlike Enqueue,
// it does not wait for an insert under way: when ctx ends during the
// commit it can return ctx's error although the batch was stored (on
// PostgreSQL), as a lost connection can. Give the tasks idempotency keys
// to be able to try again safely.
func (c *Client) EnqueueMany(ctx context.Context, tasks []NewTask) ([]EnqueueResult, error) {
	if err := c.check(ctx, false); err != nil {
		return nil, fmt.Errorf("enqueue tasks: %w", err)
	}
	rs := make([]engine.EnqueueRequest, len(tasks))
	for i, t := range tasks {
		r, err := request(t.Type, t.Payload, t.Options)
		if err != nil {
			return nil, fmt.Errorf("enqueue tasks: tasks[%d]: %w", i, err)
		}
		rs[i] = r
	}
	res, err := c.e.EnqueueMany(ctx, rs)
	if err != nil {
		if fe := goField(enqueueFields, err); fe != nil {
			return nil, fmt.Errorf("enqueue tasks: %w", fe)
		}
		return nil, err
	}
	out := make([]EnqueueResult, len(res))
	for i := range res {
		out[i] = EnqueueResult{Task: res[i].Task, Duplicate: res[i].Duplicate}
	}
	return out, nil
}

// Get returns a task, or an error matching ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (TaskInfo, error) {
	if err := c.check(ctx, false); err != nil {
		return TaskInfo{}, fmt.Errorf("get task: %w", err)
	}
	t, err := c.e.Get(ctx, id)
	if err != nil {
		return TaskInfo{}, callErr("get task", nil, err)
	}
	return t, nil
}

// Attempts returns a task's attempt history, oldest first, or an error
// matching ErrNotFound.
func (c *Client) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	if err := c.check(ctx, false); err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	as, err := c.e.Attempts(ctx, id)
	if err != nil {
		return nil, callErr("list attempts", nil, err)
	}
	return as, nil
}

// ListParams filters List. Its MaxBytes bounds the payload bytes of a page;
// List reads 0 as DefaultListBytes.
type ListParams = store.ListParams

// DefaultListBytes bounds the payload bytes of a List or ListDead page whose
// caller sets no MaxBytes (4 MiB). A page ends before the task that would
// take it past its bound, but holds at least one task: follow the cursor
// until it is "" rather than stop at a page shorter than Limit.
const DefaultListBytes = engine.DefaultListBytes

// List returns a page of tasks, newest first, and the next page's cursor
// ("" after the last page). A page holds at most p.Limit tasks and at most
// p.MaxBytes (0: DefaultListBytes) of payload, but at least one task.
func (c *Client) List(ctx context.Context, p ListParams) ([]TaskInfo, string, error) {
	if err := c.check(ctx, false); err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	if err := checkCursor(p.Cursor); err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	ts, next, err := c.e.List(ctx, p)
	if err != nil {
		return nil, "", callErr("list tasks", listFields, err)
	}
	return ts, next, nil
}

// Cancel cancels a task that has not finished and returns it. A running
// task's handler sees its context end with ErrTaskCancelled, and nothing
// it returns is recorded. A finished task is an error matching
// ErrConflict, an unknown id one matching ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (TaskInfo, error) {
	if err := c.check(ctx, false); err != nil {
		return TaskInfo{}, fmt.Errorf("cancel task: %w", err)
	}
	t, err := c.e.Cancel(ctx, id)
	if err != nil {
		return TaskInfo{}, callErr("cancel task", nil, err)
	}
	return t, nil
}

// Retry puts a dead or cancelled task back to pending with fresh attempts
// (its history is kept) and returns it. A task in another state is an
// error matching ErrConflict, an unknown id one matching ErrNotFound.
func (c *Client) Retry(ctx context.Context, id string) (TaskInfo, error) {
	if err := c.check(ctx, false); err != nil {
		return TaskInfo{}, fmt.Errorf("retry task: %w", err)
	}
	t, err := c.e.Retry(ctx, id)
	if err != nil {
		return TaskInfo{}, callErr("retry task", nil, err)
	}
	return t, nil
}

// TypeConfig is a task type's stored configuration.
type TypeConfig struct {
	Type string // the task type, as for Enqueue
	// Policy is the type's retry policy; the zero Policy leaves the type on
	// Options.DefaultPolicy. Zero fields of a non-zero one take the
	// defaults of retry.Policy.WithDefaults, not Options.DefaultPolicy's.
	Policy   retry.Policy
	Timeout  time.Duration // per attempt, at most 24h (0: Options.DefaultTimeout)
	Priority int           // default priority of new tasks enqueued without WithPriority
}

// maxTypeTimeout bounds TypeConfig.Timeout, as the engine does.
const maxTypeTimeout = 24 * time.Hour

// The Go names of the fields the engine's errors name as the HTTP API's
// JSON does: an error about WithDelay should not speak of delay_seconds.
var (
	enqueueFields = map[string]string{"delay_seconds": "WithDelay", "run_at": "WithRunAt",
		"max_attempts": "WithMaxAttempts", "priority": "WithPriority", "idempotency_key": "WithIdempotencyKey"}
	typeFields = map[string]string{"type": "Type", "retry": "Policy", "timeout_seconds": "Timeout", "priority": "Priority"}
)

// goField returns the engine's error err, when it is an invalid field
// (named as in the HTTP API's JSON, possibly under a prefix such as
// "tasks[1]."), with the field named as in the Go API, and nil for other
// errors.
func goField(fields map[string]string, err error) error {
	var fe *engine.FieldError
	if !errors.As(err, &fe) {
		return nil
	}
	prefix, name := "", fe.Field
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		prefix, name = name[:i+1], name[i+1:]
	}
	if g, ok := fields[name]; ok {
		name = g
	}
	return &engine.FieldError{Field: prefix + name, Message: fe.Message, Err: fe.Err}
}

// callErr returns the engine's error err from the call op with an invalid
// field named as in Go (fields maps the HTTP API's JSON names: IDs[2], not
// ids[2]) and op said first, and its other errors as they are: they name
// the call already.
func callErr(op string, fields map[string]string, err error) error {
	fe, ok := errors.AsType[*engine.FieldError](err)
	if !ok {
		return err
	}
	name, index := fe.Field, ""
	if i := strings.IndexByte(name, '['); i >= 0 {
		name, index = name[:i], name[i:]
	}
	if g, ok := fields[name]; ok {
		name = g
	}
	return fmt.Errorf("%s: %w", op, &engine.FieldError{Field: name + index, Message: fe.Message, Err: fe.Err})
}

// checkCursor refuses, naming the Cursor field, a cursor no page can have
// returned; the store's own refusal would not match ErrInvalid.
func checkCursor(cursor string) error {
	if err := store.CheckCursor(cursor); err != nil {
		return &engine.FieldError{Field: "Cursor", Message: "must be UTF-8 text without NUL bytes (a next cursor of a page)", Err: err}
	}
	return nil
}

// listFields are the Go names of the ListParams fields the engine's errors
// name as the HTTP API's JSON does.
var listFields = map[string]string{"type": "Type", "state": "States", "limit": "Limit", "max_bytes": "MaxBytes"}

// SetType stores a type's retry policy, timeout and default priority. A
// zero Policy leaves the type on Options.DefaultPolicy. A push target the
// type has (set through the HTTP API or the CLI) is kept; one this version
// cannot read in full is an error rather than dropped. A stored policy this
// version cannot read (a newer version's) is replaced.
func (c *Client) SetType(ctx context.Context, tc TypeConfig) error {
	if err := c.check(ctx, false); err != nil {
		return fmt.Errorf("set type: %w", err)
	}
	if tc.Timeout < 0 || tc.Timeout > maxTypeTimeout {
		return fmt.Errorf("set type: %w", &engine.FieldError{Field: "Timeout",
			Message: fmt.Sprintf("must be between 0 and %s (got %s)", maxTypeTimeout, tc.Timeout)})
	}
	spec := engine.TypeSpec{Type: tc.Type, Policy: tc.Policy, Timeout: tc.Timeout, Priority: tc.Priority}
	target, err := c.e.StoredTarget(ctx, tc.Type)
	if err != nil {
		if fe := goField(typeFields, err); fe != nil {
			err = fe
		}
		return fmt.Errorf("set type: %w", err)
	}
	spec.Target = target
	if _, err := c.e.PutType(ctx, spec); err != nil {
		if fe := goField(typeFields, err); fe != nil {
			err = fe
		}
		return fmt.Errorf("set type: %w", err)
	}
	return nil
}

// Counters are cumulative engine counters (commits, tasks fetched,
// outcomes, retries, dead, reaped, promoted) since the client started.
type Counters = engine.Counters

// Counters returns a snapshot of the engine's counters.
func (c *Client) Counters() Counters { return c.e.Counters() }
