package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxFetchTypes bounds FetchParams.Types: a fetch naming more types is
// ErrInvalid (the SQLite backend builds one query branch per type).
const MaxFetchTypes = 256

// MaxKeyBytes bounds, in bytes, the text a backend keys an index on: a
// task's id, type and idempotency key, a type configuration's name, a
// node's id and a leadership lease's name. Longer text is ErrInvalid
// everywhere, rather than refused by one backend alone (a PostgreSQL btree
// entry holds at most about 2.7 KB, id and type together included) while
// another stores it.
const MaxKeyBytes = 1024

// Fits32 reports whether n fits in 32 bits, as priorities
// (NewTask.Priority, Outcome.EffectivePrio) and NewTask.MaxAttempts must:
// backends may store them as 32-bit integers, and a value that did not fit
// would come back as another number.
func Fits32(n int) bool { return n >= math.MinInt32 && n <= math.MaxInt32 }

// CheckNewTasks validates a batch for InsertTasks, the same way for every
// backend: each task needs an id and a type; ids, types, idempotency keys
// and a lease's ids must be valid UTF-8 without NUL bytes (PostgreSQL
// refuses them in text, and an id that does not survive JSON could not be
// looked up again); priority and max attempts must fit in 32 bits (Fits32);
// ids, types and keys are at most MaxKeyBytes long; RunAt must pass
// CheckTime; a lease needs a lease id and a positive
// duration (a leased task without
// them could never be reaped); and an id may appear only once,
// unless the later task repeats an earlier one's idempotency key (it is
// then a duplicate of that task, not a second row). Errors wrap
// ErrInvalid and name the task's index.
func CheckNewTasks(tasks []NewTask) error {
	var ids, keys map[string]bool // only batches of two or more can repeat an id
	if len(tasks) > 1 {
		ids, keys = make(map[string]bool, len(tasks)), map[string]bool{}
	}
	for i, nt := range tasks {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("task %d: %w: %s", i, ErrInvalid, fmt.Sprintf(format, args...))
		}
		if nt.ID == "" || nt.Type == "" {
			return bad("id and type are required")
		}
		for _, f := range []struct{ name, v string }{{"id", nt.ID}, {"type", nt.Type}, {"idempotency key", nt.IdempotencyKey}} {
			if !ValidText(f.v) {
				return bad("%s %q is not valid UTF-8 text (or holds a NUL byte)", f.name, f.v)
			}
			if len(f.v) > MaxKeyBytes {
				return bad("%s is %d bytes long, more than %d", f.name, len(f.v), MaxKeyBytes)
			}
		}
		if !Fits32(nt.Priority) || !Fits32(nt.MaxAttempts) {
			return bad("priority %d and max attempts %d must fit in 32 bits", nt.Priority, nt.MaxAttempts)
		}
		if err := CheckTime("run time", nt.RunAt); err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
		if l := nt.Lease; l != nil {
			if l.LeaseID == "" || l.Duration <= 0 {
				return bad("a lease needs a lease id and a positive duration (got %q, %v)", l.LeaseID, l.Duration)
			}
			if !ValidText(l.LeaseID) || !ValidText(l.WorkerID) {
				return bad("lease id %q and worker id %q must be valid UTF-8 text without NUL bytes", l.LeaseID, l.WorkerID)
			}
		}
		if ids == nil {
			continue
		}
		if nt.IdempotencyKey != "" {
			if keys[nt.IdempotencyKey] {
				continue // a duplicate of an earlier task of the batch
			}
			keys[nt.IdempotencyKey] = true
		}
		if ids[nt.ID] {
			return bad("id %q twice in one batch", nt.ID)
		}
		ids[nt.ID] = true
	}
	return nil
}

// CheckLeaseEnd refuses, with ErrInvalid, a lease taken at now for d
// whose expiry would lie outside CheckTime's range: it is stored as a time
// like any other (a fetch's, a direct dispatch's, a leadership lease's).
func CheckLeaseEnd(now time.Time, d time.Duration) error {
	return CheckTime("lease expiry", now.Add(d))
}

// CheckInsertLeases refuses, with ErrInvalid, a batch for InsertTasks in
// which a task that starts running (a Lease, and due at p.Now) would hold a
// lease whose expiry passes CheckTime's range (CheckLeaseEnd).
func CheckInsertLeases(p InsertParams) error {
	for i, nt := range p.Tasks {
		if nt.Lease == nil || nt.RunAt.After(p.Now) {
			continue
		}
		if err := CheckLeaseEnd(p.Now, nt.Lease.Duration); err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
	}
	return nil
}

// ValidText reports whether s is valid UTF-8 without NUL bytes.
func ValidText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// CheckContext refuses a nil context with ErrInvalid naming ctx, the same
// way for every backend: each method of a Store that takes a context
// checks it before anything else. Passed on, a nil context panics inside
// the database driver, where SQLite's database/sql pool could be left
// with a lock held, so that every later call of the store hung.
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("ctx is nil (a context is required): %w", ErrInvalid)
	}
	return nil
}

// CheckNow refuses a zero now, the same way for every backend: each method
// that takes the caller's clock needs it (taken as year 1, it would date
// rows, leases and heartbeats two thousand years back). The error wraps
// ErrInvalid.
func CheckNow(now time.Time) error {
	if now.IsZero() {
		return fmt.Errorf("now is the zero time (the caller's clock is required): %w", ErrInvalid)
	}
	return CheckTime("now", now)
}

// CheckTime refuses, with ErrInvalid, a time outside years 1 to 9999 (in
// UTC; the zero time is year 1 and passes). Every backend stores the times
// of that range exactly, and a time outside it could not be stored as
// given: SQLite's 64-bit microseconds and PostgreSQL's encoding of
// timestamptz wrap around far enough out, so a task meant for "never"
// would be stored as due long ago and run at once. It is also the range of
// RFC 3339, in which the API writes times.
func CheckTime(what string, t time.Time) error {
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%s %s is outside years 1 to 9999: %w", what, t.UTC().Format(time.RFC3339Nano), ErrInvalid)
	}
	return nil
}

// CheckFetch validates FetchParams, the same way for every backend: a
// positive Limit and LeaseDuration, a Now, a worker id and types that are
// text (CheckText), and at most MaxFetchTypes distinct types. It returns the distinct types, sorted (nil for any
// type). Errors wrap ErrInvalid.
func CheckFetch(p FetchParams) ([]string, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("limit must be positive (got %d): %w", p.Limit, ErrInvalid)
	}
	if err := CheckNow(p.Now); err != nil {
		return nil, err
	}
	if p.LeaseDuration <= 0 {
		return nil, fmt.Errorf("lease duration must be positive (got %s): %w", p.LeaseDuration, ErrInvalid)
	}
	if err := CheckLeaseEnd(p.Now, p.LeaseDuration); err != nil {
		return nil, err
	}
	if err := CheckText("worker id", p.WorkerID); err != nil {
		return nil, err
	}
	if len(p.Types) == 0 {
		return nil, nil
	}
	if err := CheckText("type", p.Types...); err != nil {
		return nil, err
	}
	types := slices.Compact(slices.Sorted(slices.Values(p.Types)))
	if len(types) > MaxFetchTypes {
		return nil, fmt.Errorf("at most %d types per fetch (got %d): %w", MaxFetchTypes, len(types), ErrInvalid)
	}
	return types, nil
}

// MaxExcludeTypes bounds the distinct types one ExpiredLeases or
// NextWakeup call may leave out.
const MaxExcludeTypes = 10000

// CheckExpired validates ExpiredParams and returns its ExcludeTypes sorted
// without duplicates (nil when there are none).
func CheckExpired(p ExpiredParams) ([]string, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("limit must be positive (got %d): %w", p.Limit, ErrInvalid)
	}
	if err := CheckNow(p.Now); err != nil {
		return nil, err
	}
	if len(p.ExcludeTypes) == 0 {
		return nil, nil
	}
	if err := CheckText("type", p.ExcludeTypes...); err != nil {
		return nil, err
	}
	types := slices.Compact(slices.Sorted(slices.Values(p.ExcludeTypes)))
	if len(types) > MaxExcludeTypes {
		return nil, fmt.Errorf("at most %d excluded types (got %d): %w", MaxExcludeTypes, len(types), ErrInvalid)
	}
	return types, nil
}

// CheckWakeup validates WakeupParams and returns its ExcludeTypes sorted
// without duplicates (nil when there are none), as CheckExpired does.
func CheckWakeup(p WakeupParams) ([]string, error) {
	return CheckExpired(ExpiredParams{Limit: 1, Now: time.Unix(0, 0), ExcludeTypes: p.ExcludeTypes})
}

// CheckLimit validates the Limit of a bulk change (RedriveDead, PurgeDead,
// DeleteFinished), where 0 means no limit: a negative one is ErrInvalid
// rather than read as "all".
func CheckLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("limit must not be negative (got %d): %w", limit, ErrInvalid)
	}
	return nil
}

// CheckText refuses, with ErrInvalid, a value that is not valid UTF-8 text
// or holds a NUL byte (ValidText), the same way for every backend, where a
// method would store it (a worker id, a type's name, a node's fields, a
// leadership lease's name and holder) or name it in a fetch. PostgreSQL
// refuses such text outright, and SQLite would store bytes that do not
// survive JSON. what names the field in the error.
func CheckText(what string, values ...string) error {
	for _, v := range values {
		if !ValidText(v) {
			return fmt.Errorf("%s %q is not valid UTF-8 text (or holds a NUL byte): %w", what, v, ErrInvalid)
		}
	}
	return nil
}

// CheckCursor refuses, with ErrInvalid, a pagination cursor that no
// listing can have returned: cursors are task ids, which are text.
func CheckCursor(cursor string) error {
	return CheckText("cursor", cursor)
}

// CheckTypeConfig validates a TypeConfig for PutType, the same way for
// every backend: a type name that is a key (CheckKey) and a priority that fits in 32
// bits (Fits32, as a task's: a backend may store it as a 32-bit integer).
// Errors wrap ErrInvalid.
func CheckTypeConfig(t TypeConfig) error {
	if t.Type == "" {
		return fmt.Errorf("empty type: %w", ErrInvalid)
	}
	if err := CheckKey("type", t.Type); err != nil {
		return err
	}
	if !Fits32(t.Priority) {
		return fmt.Errorf("priority %d does not fit in 32 bits: %w", t.Priority, ErrInvalid)
	}
	return nil
}

// CheckKey is CheckText for text a backend keys an index on (a type's
// name, a node's id, a leadership lease's name), which must also be at
// most MaxKeyBytes long.
func CheckKey(what, v string) error {
	if err := CheckText(what, v); err != nil {
		return err
	}
	if len(v) > MaxKeyBytes {
		return fmt.Errorf("%s is %d bytes long, more than %d: %w", what, len(v), MaxKeyBytes, ErrInvalid)
	}
	return nil
}

// MaxDeadIDs bounds DeadFilter.IDs: a filter naming more ids is ErrInvalid
// (CheckDeadIDs) on every backend (SQLite binds each id as a parameter of
// one statement).
const MaxDeadIDs = 16000

// CheckDeadIDs refuses, with ErrInvalid, a DeadFilter naming more than
// MaxDeadIDs ids.
func CheckDeadIDs(f DeadFilter) error {
	if len(f.IDs) > MaxDeadIDs {
		return fmt.Errorf("at most %d ids (got %d): %w", MaxDeadIDs, len(f.IDs), ErrInvalid)
	}
	return nil
}

// CheckDeadFilter validates a DeadFilter for ListDead, RedriveDead and
// PurgeDead, the same way for every backend: at most MaxDeadIDs ids
// (CheckDeadIDs), and Since and Before within CheckTime's range (a time
// outside it would wrap around in a backend's encoding, and a "since" far
// in the future match every dead task). Errors wrap ErrInvalid.
func CheckDeadFilter(f DeadFilter) error {
	if err := CheckDeadIDs(f); err != nil {
		return err
	}
	if err := CheckTime("since", f.Since); err != nil {
		return err
	}
	return CheckTime("before", f.Before)
}

// CheckRetention validates RetentionParams for DeleteFinished, the same
// way for every backend: a Limit that is not negative (CheckLimit) and
// cut-offs within CheckTime's range (one far in the past could wrap
// around to far in the future and delete every finished task). Errors
// wrap ErrInvalid.
func CheckRetention(p RetentionParams) error {
	if err := CheckLimit(p.Limit); err != nil {
		return err
	}
	for _, c := range []struct {
		what string
		t    time.Time
	}{{"succeeded cut-off", p.SucceededBefore}, {"cancelled cut-off", p.CancelledBefore}, {"dead cut-off", p.DeadBefore}} {
		if err := CheckTime(c.what, c.t); err != nil {
			return err
		}
	}
	return nil
}
