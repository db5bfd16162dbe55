package store

import (
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
// RunAt must pass CheckTime; a lease needs a lease id and a positive
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

// ValidText reports whether s is valid UTF-8 without NUL bytes.
func ValidText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
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
// positive Limit and LeaseDuration, a Now, and at most MaxFetchTypes
// distinct types. It returns the distinct types, sorted (nil for any
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
	if len(p.Types) == 0 {
		return nil, nil
	}
	types := slices.Compact(slices.Sorted(slices.Values(p.Types)))
	if len(types) > MaxFetchTypes {
		return nil, fmt.Errorf("at most %d types per fetch (got %d): %w", MaxFetchTypes, len(types), ErrInvalid)
	}
	return types, nil
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
