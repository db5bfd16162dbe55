package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/retryq/retryq/store"
)

// ErrInvalid is matched (errors.Is) by every *FieldError.
var ErrInvalid = errors.New("invalid input")

// FieldError is a validation error that names the offending field.
type FieldError struct {
	Field   string
	Message string
	Err     error // the cause, when another package's check refused the value (nil otherwise)
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the cause, if any.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Limits on enqueued values.
const (
	MaxTypeLen        = 128
	MaxIdempotencyLen = 255
	MaxPriority       = 1_000_000
	MaxMaxAttempts    = 10_000
	MaxBatch          = 10_000
	// MaxPayloadBytes bounds a task's payload once compacted, whichever
	// entry point enqueues it (the HTTP API's body limit, 1 MiB by default, can be
	// raised). Every answer holding the task carries the payload, escaped
	// up to six times its size, and `retryq` reads answers of at most
	// 64 MiB: a larger payload would be a task no CLI pull worker can
	// lease and no `retryq tasks get` can show.
	MaxPayloadBytes = 8 << 20
	// MaxPayloadDepth bounds how deeply a task's payload nests arrays and
	// objects. Answers hold the payload a few levels down, and decoders
	// stop at a depth of their own: Go's at 10000, Python's near 1000 (its
	// recursion limit). A payload past theirs would be a task whose every
	// list page and lease answer (with the other tasks in it) no worker in
	// that language could read.
	MaxPayloadDepth = 512
)

// EnqueueRequest describes a task to enqueue.
type EnqueueRequest struct {
	Type           string
	Payload        json.RawMessage // must be valid JSON, stored compacted (a copy: the caller may reuse it); empty means null
	Priority       *int            // nil = the type's default priority
	MaxAttempts    int             // 0 = the type's policy decides
	IdempotencyKey string
	RunAt          time.Time     // absolute first run time; zero = now (+Delay)
	Delay          time.Duration // relative first run time; not with RunAt
}

// ValidateType checks a task type name.
func ValidateType(field, typ string) error {
	if typ == "" {
		return fieldErr(field, "is required")
	}
	if len(typ) > MaxTypeLen {
		return fieldErr(field, "is longer than %d bytes", MaxTypeLen)
	}
	for _, r := range typ {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.' || r == ':' || r == '/') {
			return fieldErr(field, "may contain only letters, digits and _ - . : / (got %q)", r)
		}
	}
	// A type is also a path under /v1/types/: an empty, "." or ".." segment
	// would be cleaned into another type's path.
	for seg := range strings.SplitSeq(typ, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fieldErr(field, "must not have an empty, \".\" or \"..\" segment between slashes (got %q)", typ)
		}
	}
	return nil
}

func (e *Engine) prepare(ctx context.Context, prefix string, r EnqueueRequest, now time.Time) (store.NewTask, error) {
	if err := ValidateType(prefix+"type", r.Type); err != nil {
		return store.NewTask{}, err
	}
	payload, err := compactPayload(prefix, r.Payload)
	if err != nil {
		return store.NewTask{}, err
	}
	if r.MaxAttempts < 0 || r.MaxAttempts > MaxMaxAttempts {
		return store.NewTask{}, fieldErr(prefix+"max_attempts", "must be between 0 and %d (got %d)", MaxMaxAttempts, r.MaxAttempts)
	}
	if len(r.IdempotencyKey) > MaxIdempotencyLen {
		return store.NewTask{}, fieldErr(prefix+"idempotency_key", "is longer than %d bytes", MaxIdempotencyLen)
	}
	if !store.ValidText(r.IdempotencyKey) {
		return store.NewTask{}, fieldErr(prefix+"idempotency_key", "must be valid UTF-8 text without NUL bytes")
	}
	if r.Delay < 0 {
		return store.NewTask{}, fieldErr(prefix+"delay_seconds", "must not be negative")
	}
	if r.Delay > 0 && !r.RunAt.IsZero() {
		return store.NewTask{}, fieldErr(prefix+"run_at", "cannot be combined with a delay")
	}
	if !r.RunAt.IsZero() && store.CheckTime("run time", r.RunAt) != nil {
		// The store would refuse it too, but as a whole batch naming no field.
		return store.NewTask{}, fieldErr(prefix+"run_at", "must be within years 1 to 9999 in UTC (got %s)", r.RunAt.UTC().Format(time.RFC3339Nano))
	}
	// Without a delay or run time, the run time stays zero: the store
	// takes it as the insert's now. The check's now would be in the future
	// for an insert whose clock reads earlier (a smaller clock correction
	// applied in between), which would store the task scheduled.
	runAt := r.RunAt
	if runAt.IsZero() && r.Delay > 0 {
		runAt = now.Add(r.Delay)
	}
	var prio int
	if r.Priority != nil {
		prio = *r.Priority
		if prio < -MaxPriority || prio > MaxPriority {
			return store.NewTask{}, fieldErr(prefix+"priority", "must be between %d and %d (got %d)", -MaxPriority, MaxPriority, prio)
		}
	} else {
		tc, err := e.types.get(ctx, r.Type)
		if err != nil {
			return store.NewTask{}, err
		}
		prio = tc.spec.Priority
	}
	return store.NewTask{
		ID:             NewID(now),
		Type:           r.Type,
		Payload:        payload,
		Priority:       prio,
		MaxAttempts:    r.MaxAttempts,
		IdempotencyKey: r.IdempotencyKey,
		RunAt:          runAt,
	}, nil
}

// Enqueue validates and durably enqueues one task. Concurrent calls are
// coalesced into shared commits. A repeated idempotency key returns the
// existing task with Duplicate set.
//
// A caller whose ctx ends is never told its enqueue failed when it was
// made: while the task still waits for the insert loop, Enqueue returns
// ctx's error and the task is dropped; once its insert has been sent to the
// store, Enqueue waits for that commit (bounded by the lease duration) and
// returns its result.
func (e *Engine) Enqueue(ctx context.Context, r EnqueueRequest) (store.InsertResult, error) {
	if err := ctx.Err(); err != nil {
		return store.InsertResult{}, fmt.Errorf("enqueue task: %w", err)
	}
	nt, err := e.prepare(ctx, "", r, e.now())
	if err != nil {
		return store.InsertResult{}, err
	}
	c := &insertCall{nt: nt}
	reply := make(chan batchReply[store.InsertResult], 1)
	call := batchCall[*insertCall, store.InsertResult]{req: c, waits: true, after: func(res store.InsertResult, err error) {
		reply <- batchReply[store.InsertResult]{res: res, err: err}
	}}
	if err := e.inserts.send(ctx, call); err != nil {
		return store.InsertResult{}, fmt.Errorf("enqueue task: %w", err)
	}
	var rep batchReply[store.InsertResult]
	select {
	case rep = <-reply:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			return store.InsertResult{}, fmt.Errorf("enqueue task: %w", ctx.Err())
		}
		rep = <-reply // taken: its commit is bounded (commitInserts)
	}
	if rep.err != nil {
		return store.InsertResult{}, fmt.Errorf("enqueue task: %w", rep.err)
	}
	return rep.res, nil
}

// insertCall is one Enqueue waiting for the insert loop. Its state is
// callQueued until commitInserts takes it into an insert (callTaken) or
// its caller, whose context ended first, gives it up (callAbandoned): a
// caller is never told its enqueue was cancelled after it was inserted.
type insertCall struct {
	nt    store.NewTask
	state atomic.Int32
}

const (
	callQueued int32 = iota
	callTaken
	callAbandoned
)

// errAbandoned answers an enqueue whose caller gave it up; nobody reads it.
var errAbandoned = errors.New("enqueue abandoned by its caller")

// EnqueueMany validates and enqueues a batch atomically: all tasks are
// inserted in one transaction, or none when any is invalid. The insert
// runs under ctx: when ctx ends during the commit, the store may stop
// waiting for it (PostgreSQL does) and the error is ctx's although the
// batch may have been stored (see Client.EnqueueMany).
func (e *Engine) EnqueueMany(ctx context.Context, rs []EnqueueRequest) ([]store.InsertResult, error) {
	if len(rs) == 0 {
		return nil, fieldErr("tasks", "must not be empty")
	}
	if len(rs) > MaxBatch {
		return nil, fieldErr("tasks", "has %d tasks; at most %d per batch", len(rs), MaxBatch)
	}
	now := e.now()
	nts := make([]store.NewTask, len(rs))
	for i, r := range rs {
		nt, err := e.prepare(ctx, fmt.Sprintf("tasks[%d].", i), r, now)
		if err != nil {
			return nil, err
		}
		nts[i] = nt
	}
	res, err := e.st.InsertTasks(ctx, store.InsertParams{Tasks: nts, Now: now})
	if err != nil {
		return nil, fmt.Errorf("enqueue tasks: %w", err)
	}
	e.afterInsert(res, now, false)
	return res, nil
}

// commitInserts inserts the tasks of one batch of enqueues, except those
// whose callers gave them up while they were queued (see insertCall).
func (e *Engine) commitInserts(ctx context.Context, calls []*insertCall) ([]store.InsertResult, []error, error) {
	res, errs := make([]store.InsertResult, len(calls)), make([]error, len(calls))
	nts, idx := make([]store.NewTask, 0, len(calls)), make([]int, 0, len(calls))
	for i, c := range calls {
		if !c.state.CompareAndSwap(callQueued, callTaken) {
			errs[i] = errAbandoned
			continue
		}
		nts, idx = append(nts, c.nt), append(idx, i)
	}
	if len(nts) == 0 {
		return res, errs, nil
	}
	got, gotErrs, err := e.insertGroup(ctx, nts)
	for j, i := range idx {
		switch {
		case err != nil:
			errs[i] = err
		case j < len(gotErrs) && gotErrs[j] != nil:
			errs[i] = gotErrs[j]
		case j < len(got):
			res[i] = got[j]
		}
	}
	return res, errs, nil
}

// insertGroup inserts the tasks of the enqueues commitInserts took. The
// commit is bounded by the lease duration, as outcome commits are: the
// batch runs detached from its callers' contexts (one caller giving up
// must not fail the others), and without a bound a database that hangs (a
// network path cut without a reset, a table lock held by an operator's
// session) would hold this insert loop, and the enqueues queued behind it,
// for as long as the kernel takes to notice, which can be many minutes.
// The tasks leased at insert would be stale by then anyway: their lease is
// as long as the bound.
func (e *Engine) insertGroup(ctx context.Context, nts []store.NewTask) ([]store.InsertResult, []error, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.LeaseDuration)
	defer cancel()
	now := e.now()
	picks := e.pickLocal(nts, now)
	res, err := e.st.InsertTasks(ctx, store.InsertParams{Tasks: nts, Now: now})
	e.handOver(picks, nts, res, err)
	if err != nil && len(nts) > 1 && errors.Is(err, store.ErrInvalid) {
		// The enqueues of different callers share this insert: one
		// caller's bad task must not fail the others.
		return e.insertEachAlone(ctx, nts, now)
	}
	if err != nil {
		return nil, nil, err
	}
	e.ctr.insertCommits.Add(1)
	e.afterInsert(res, now, true)
	return res, nil, nil
}

// insertEachAlone inserts the tasks of a refused group one by one (not
// leased at insert: the group's reservations were given back), so that
// only the invalid ones fail.
func (e *Engine) insertEachAlone(ctx context.Context, nts []store.NewTask, now time.Time) ([]store.InsertResult, []error, error) {
	res, errs := make([]store.InsertResult, len(nts)), make([]error, len(nts))
	for i := range nts {
		nt := nts[i]
		nt.Lease = nil
		r, err := e.st.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{nt}, Now: now})
		if err != nil {
			errs[i] = err
			continue
		}
		res[i] = r[0]
		e.ctr.insertCommits.Add(1)
		e.afterInsert(r, now, true)
	}
	return res, errs, nil
}

// afterInsert counts the inserted tasks of a coalesced commit (counted)
// and wakes fetchers for ready tasks and the scheduler for future ones.
// Duplicates of existing tasks count and wake nothing.
func (e *Engine) afterInsert(res []store.InsertResult, now time.Time, counted bool) {
	ready, readyID := 0, ""
	// The types of the ready tasks, for the wake-up, up to wakeTypesMax:
	// a commit of more types wakes every fetcher.
	var typesBuf [wakeTypesMax]string
	types, anyType := typesBuf[:0], false
	var earliest time.Time
	debug := e.debugging()
	for i := range res {
		if res[i].Duplicate {
			continue
		}
		if counted {
			e.ctr.inserted.Add(1)
		}
		t := &res[i].Task
		if t.State == store.StatePending {
			ready++
			readyID = t.ID
			if !anyType && !slices.Contains(types, t.Type) {
				if anyType = len(types) == wakeTypesMax; !anyType {
					types = append(types, t.Type)
				}
			}
		} else if t.State == store.StateScheduled && (earliest.IsZero() || t.RunAt.Before(earliest)) {
			earliest = t.RunAt
		}
		if debug {
			e.log.Debug("task enqueued", "task_id", t.ID, "type", t.Type, "state", t.State)
		}
	}
	switch {
	case ready > 0 && anyType:
		e.wake.broadcast()
	case ready == 1:
		e.wake.broadcastOne(types[0], readyID) // a long poll that leases it wakes no other
	case ready > 0:
		e.wake.broadcastTypes(types)
	}
	if !earliest.IsZero() {
		e.sched.poke(earliest)
	}
}

// wakeTypesMax bounds the types a commit's wake-up names: past it, the
// wake-up goes to every fetcher, so that matching it stays cheap.
const wakeTypesMax = 8

// compactPayload checks a payload and returns it compacted, in a buffer of
// its own: every path (answers, push bodies, handlers, pull workers) then
// carries the same bytes. Whitespace between tokens is dropped; everything
// else (numbers, escapes, member order, repeated members) stays as given.
// An empty payload is null. The size bound applies to the compacted JSON.
func compactPayload(prefix string, p json.RawMessage) (json.RawMessage, error) {
	if len(p) == 0 {
		return json.RawMessage("null"), nil
	}
	var buf bytes.Buffer
	buf.Grow(min(len(p), MaxPayloadBytes+1))
	if err := json.Compact(&buf, p); err != nil {
		if jsonDepth(p) > MaxPayloadDepth {
			// encoding/json gives up past a depth of 10000: the text may
			// well be JSON, only too deep.
			return nil, fieldErr(prefix+"payload", "nests arrays and objects more than %d deep", MaxPayloadDepth)
		}
		return nil, fieldErr(prefix+"payload", "is not valid JSON")
	}
	payload := json.RawMessage(buf.Bytes())
	switch {
	case len(payload) > MaxPayloadBytes:
		return nil, fieldErr(prefix+"payload", "is larger than %d bytes (got %d)", MaxPayloadBytes, len(payload))
	case !utf8.Valid(payload):
		// Stored as given, it would be written back raw in every answer
		// holding it, which would then not be JSON (RFC 8259: UTF-8).
		return nil, fieldErr(prefix+"payload", "must be UTF-8 (it holds bytes that are not)")
	case jsonDepth(payload) > MaxPayloadDepth:
		return nil, fieldErr(prefix+"payload", "nests arrays and objects more than %d deep", MaxPayloadDepth)
	}
	return payload, nil
}

// jsonDepth returns how deeply the valid JSON text b nests arrays and
// objects (0 for a scalar). Brackets inside strings do not count.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++ // the escaped character cannot end the string
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
