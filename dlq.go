package retryq

import (
	"context"
	"fmt"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// The reasons a task is dead-lettered (TaskInfo.DeadReason, DeadFilter.Reason).
const (
	DeadNonRetryable = store.DeadNonRetryable // a permanent error: no attempt wasted
	DeadMaxAttempts  = store.DeadMaxAttempts  // the attempts ran out
	DeadRetryWindow  = store.DeadRetryWindow  // the retry window ran out
)

// DeadFilter selects dead-lettered tasks for ListDead, Redrive and Purge.
// Zero fields do not filter: the zero DeadFilter selects every dead task.
type DeadFilter struct {
	Type      string // the task type
	ErrorCode string // the last error's code
	// NoErrorCode selects only tasks whose last error has no code (the
	// DeadSummary groups with an empty ErrorCode); not with ErrorCode.
	NoErrorCode bool
	Reason      string // DeadNonRetryable, DeadMaxAttempts or DeadRetryWindow
	// Since selects tasks that died at or after it, Before those that
	// died before it: time.Now().Add(-d) selects tasks dead for d or
	// more. Each is zero or within years 1 to 9999 (ErrInvalid otherwise).
	Since, Before time.Time
	// IDs selects these tasks only (at most 10,000). A non-nil empty list
	// is refused with ErrInvalid rather than read as "every dead task":
	// leave it nil to select by the other fields.
	IDs []string
	// Limit bounds how many tasks ListDead lists (0: 100; at most 1,000)
	// and how many Redrive or Purge select (0: no limit).
	Limit int
	// Cursor is the next page's cursor returned by ListDead.
	Cursor string
	// MaxBytes bounds the payload bytes of a ListDead page (0:
	// DefaultListBytes, 4 MiB): the page ends before the task that would take it
	// past the bound, but holds at least one task, and its cursor continues
	// right after its last task. Redrive and Purge ignore it.
	MaxBytes int
}

// DeadGroup is one row of DeadSummary: the dead tasks of one type, last
// error code and reason.
type DeadGroup = store.DeadGroup

// deadFields are the Go names of the DeadFilter fields the engine's errors
// name as the HTTP API's JSON does.
var deadFields = map[string]string{"type": "Type", "error_code": "ErrorCode", "no_error_code": "NoErrorCode",
	"reason": "Reason", "since": "Since", "ids": "IDs", "limit": "Limit", "cursor": "Cursor",
	"max_bytes": "MaxBytes"}

// checkDeadTime refuses, naming field, a time of a dead-task filter
// outside years 1 to 9999 (store.CheckTime), as WithRunAt's is refused.
// The stores compare such times as 64-bit microseconds, which wrap around
// far enough out: a Before in year -300000 selected every dead task.
func checkDeadTime(field string, t time.Time) error {
	if err := store.CheckTime(field, t); err != nil {
		return &engine.FieldError{Field: field, Message: fmt.Sprintf("must be within years 1 to 9999 in UTC (got %s)",
			t.UTC().Format(time.RFC3339Nano)), Err: err}
	}
	return nil
}

// checkDeadTimes checks f's Since and Before (checkDeadTime).
func checkDeadTimes(f DeadFilter) error {
	if err := checkDeadTime("Since", f.Since); err != nil {
		return err
	}
	return checkDeadTime("Before", f.Before)
}

// deadFilter returns the store's filter for f. The engine checks it.
func deadFilter(f DeadFilter) store.DeadFilter {
	return store.DeadFilter{
		Type: f.Type, ErrorCode: f.ErrorCode, NoErrorCode: f.NoErrorCode, Reason: f.Reason,
		Since: f.Since, Before: f.Before, IDs: f.IDs, Limit: f.Limit, Cursor: f.Cursor,
		MaxBytes: f.MaxBytes,
	}
}

// ListDead returns a page of dead-lettered tasks matching f, newest first,
// and the next page's cursor ("" after the last page).
func (c *Client) ListDead(ctx context.Context, f DeadFilter) ([]TaskInfo, string, error) {
	if err := c.check(ctx, false); err != nil {
		return nil, "", fmt.Errorf("list dead tasks: %w", err)
	}
	if err := checkCursor(f.Cursor); err != nil {
		return nil, "", fmt.Errorf("list dead tasks: %w", err)
	}
	if err := checkDeadTimes(f); err != nil {
		return nil, "", fmt.Errorf("list dead tasks: %w", err)
	}
	ts, next, err := c.e.ListDead(ctx, deadFilter(f))
	if err != nil {
		return nil, "", callErr("list dead tasks", deadFields, err)
	}
	return ts, next, nil
}

// DeadSummary counts the dead-lettered tasks that died at or after since
// (all of them when since is zero) by type, last error code and reason,
// largest group first. A since outside years 1 to 9999 is an ErrInvalid
// error.
func (c *Client) DeadSummary(ctx context.Context, since time.Time) ([]DeadGroup, error) {
	if err := c.check(ctx, false); err != nil {
		return nil, fmt.Errorf("summarize dead tasks: %w", err)
	}
	if err := checkDeadTime("since", since); err != nil {
		return nil, fmt.Errorf("summarize dead tasks: %w", err)
	}
	s, err := c.e.DeadSummary(ctx, store.SummaryParams{Since: since})
	if err != nil {
		return nil, err // "summarize dead tasks: ..." from the store
	}
	return s.Groups, nil
}

// Redrive puts the dead-lettered tasks matching f back to pending with
// fresh attempts, as Retry does for one, and returns how many it moved.
// Both backends move them in transactions of at most 500 tasks each: with
// an error, it returns how many moved before it. The zero DeadFilter
// redrives every dead task.
func (c *Client) Redrive(ctx context.Context, f DeadFilter) (int, error) {
	if err := c.check(ctx, false); err != nil {
		return 0, fmt.Errorf("redrive dead tasks: %w", err)
	}
	if f.Cursor != "" {
		return 0, fmt.Errorf("redrive dead tasks: %w", &engine.FieldError{Field: "Cursor", Message: "is for ListDead only"})
	}
	if err := checkDeadTimes(f); err != nil {
		return 0, fmt.Errorf("redrive dead tasks: %w", err)
	}
	n, err := c.e.Redrive(ctx, deadFilter(f))
	if err != nil {
		return n, callErr("redrive dead tasks", deadFields, err)
	}
	return n, nil
}

// Purge deletes the dead-lettered tasks matching f, with their history,
// and returns how many it deleted (with an error, how many it deleted
// before it). Their idempotency keys are free again.
// The zero DeadFilter purges every dead task.
func (c *Client) Purge(ctx context.Context, f DeadFilter) (int, error) {
	if err := c.check(ctx, false); err != nil {
		return 0, fmt.Errorf("purge dead tasks: %w", err)
	}
	if f.Cursor != "" {
		return 0, fmt.Errorf("purge dead tasks: %w", &engine.FieldError{Field: "Cursor", Message: "is for ListDead only"})
	}
	if err := checkDeadTimes(f); err != nil {
		return 0, fmt.Errorf("purge dead tasks: %w", err)
	}
	n, err := c.e.Purge(ctx, deadFilter(f))
	if err != nil {
		return n, callErr("purge dead tasks", deadFields, err)
	}
	return n, nil
}
