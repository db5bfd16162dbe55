package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

// MaxListLimit caps page sizes of list operations.
const MaxListLimit = 1000

// DefaultListBytes bounds the payload bytes of a page of a list operation
// whose caller sets no bound (ListParams.MaxBytes, DeadFilter.MaxBytes):
// a page stops before the task whose payload would take it past the
// bound, but holds at least one task, so a page's payloads exceed it only
// when its single task's does. Without it a page of MaxListLimit tasks of
// MaxPayloadBytes each would be built whole in memory.
const DefaultListBytes = 4 << 20

// DefaultFetchBytes bounds the payload bytes of one fetch (a pull lease
// answer, an in-process worker's or a pusher's batch) as DefaultListBytes
// bounds a page: the fetch stops before the task whose payload would take
// it past the bound, but leases at least one task; the others stay pending
// for the next fetch. Without it a lease of MaxLeaseBatch tasks of
// MaxPayloadBytes each would be built whole in memory.
const DefaultFetchBytes = 4 << 20

// fetchMayHaveMore tells a fetcher whether its fetch of up to limit tasks
// may have left due tasks behind, so that it fetches again at once rather
// than wait for a wake-up or its poll interval: when it came back full, or
// when its payloads passed half of DefaultFetchBytes, as a fetch cut short
// by the byte bound does unless the task it stopped before is larger than
// half the bound (that one waits for the next fetch). A short fetch of
// small payloads means the queue is drained, as before the bound.
func fetchMayHaveMore(tasks []store.Task, limit int) bool {
	if len(tasks) >= limit {
		return true
	}
	bytes := 0
	for i := range tasks {
		bytes += len(tasks[i].Payload)
	}
	return bytes > DefaultFetchBytes/2
}

// ValidateID checks a task id supplied by a caller.
func ValidateID(id string) error {
	if id == "" {
		return fieldErr("id", "is required")
	}
	if len(id) > 64 {
		return fieldErr("id", "is longer than 64 bytes")
	}
	if !store.ValidText(id) {
		return fieldErr("id", "must be valid UTF-8 text without NUL bytes")
	}
	return nil
}

// Get returns a task. The store's errors already name the call and the
// task ("get task <id>: not found", storage.md), so the methods here
// return them as they are rather than saying so twice.
func (e *Engine) Get(ctx context.Context, id string) (store.Task, error) {
	if err := ValidateID(id); err != nil {
		return store.Task{}, err
	}
	return e.st.GetTask(ctx, id) // the store's errors name the call (storage.md, Errors)
}

// Attempts returns a task's attempt history.
func (e *Engine) Attempts(ctx context.Context, id string) ([]store.Attempt, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	return e.st.ListAttempts(ctx, id)
}

func checkLimit(limit int) (int, error) {
	if limit == 0 {
		return 100, nil
	}
	if limit < 0 || limit > MaxListLimit {
		return 0, fieldErr("limit", "must be between 1 and %d (got %d)", MaxListLimit, limit)
	}
	return limit, nil
}

// checkMaxBytes returns the payload bound of a page: DefaultListBytes when
// the caller set none.
func checkMaxBytes(n int) (int, error) {
	if n == 0 {
		return DefaultListBytes, nil
	}
	if n < 0 {
		return 0, fieldErr("max_bytes", "must not be negative (got %d)", n)
	}
	return n, nil
}

// List returns a page of tasks, newest first.
func (e *Engine) List(ctx context.Context, p store.ListParams) ([]store.Task, string, error) {
	var err error
	if p.Limit, err = checkLimit(p.Limit); err != nil {
		return nil, "", err
	}
	if p.MaxBytes, err = checkMaxBytes(p.MaxBytes); err != nil {
		return nil, "", err
	}
	if p.Type != "" {
		if err := ValidateType("type", p.Type); err != nil {
			return nil, "", err
		}
	}
	for _, s := range p.States {
		if !s.Valid() {
			return nil, "", fieldErr("state", "unknown state %q (want one of scheduled, pending, running, retry_waiting, succeeded, dead, cancelled)", s)
		}
	}
	return e.st.ListTasks(ctx, p)
}

// Cancel cancels a task that has not finished.
func (e *Engine) Cancel(ctx context.Context, id string) (store.Task, error) {
	if err := ValidateID(id); err != nil {
		return store.Task{}, err
	}
	held := e.leases.leaseOf(id) // a handler of this process may be running it
	t, err := e.st.CancelTask(ctx, store.CancelParams{ID: id, Now: e.now()})
	if err != nil {
		return store.Task{}, err // "cancel task <id>: ..." from the store
	}
	e.log.Info("task cancelled", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt)
	if held != "" {
		e.leases.cancelled(id, held)
	}
	// A worker here may have leased the task after the look above, before
	// the cancellation committed: the cancelled task names that attempt.
	e.leases.cancelledAttempt(id, t.Attempt, t.StartedAt)
	return t, nil
}

// Retry manually retries a dead or cancelled task.
func (e *Engine) Retry(ctx context.Context, id string) (store.Task, error) {
	if err := ValidateID(id); err != nil {
		return store.Task{}, err
	}
	t, err := e.st.RetryTask(ctx, store.RetryParams{ID: id, Now: e.now()})
	if err != nil {
		return store.Task{}, err // "retry task <id>: ..." from the store
	}
	e.log.Info("task retried manually", "task_id", t.ID, "type", t.Type)
	e.wake.broadcastOne(t.Type, t.ID)
	return t, nil
}

// checkDeadFilter checks the rules of a dead-task filter that every entry
// point shares, naming the fields as the HTTP API's JSON does (the Go
// client renames them), and stamps the filter with the engine's clock.
func (e *Engine) checkDeadFilter(f *store.DeadFilter) error {
	// An empty list of ids would select no task by id, so read as no
	// filter: a caller whose list came out empty would redrive or purge
	// the whole DLQ.
	if f.IDs != nil && len(f.IDs) == 0 {
		return fieldErr("ids", "must not be empty (it would select every dead task): leave it out to select by the other fields")
	}
	if f.NoErrorCode && f.ErrorCode != "" {
		return fieldErr("no_error_code", "cannot be combined with an error code")
	}
	if f.Type != "" {
		if err := ValidateType("type", f.Type); err != nil {
			return err
		}
	}
	if f.Reason != "" && f.Reason != store.DeadNonRetryable && f.Reason != store.DeadMaxAttempts && f.Reason != store.DeadRetryWindow {
		return fieldErr("reason", "unknown dead reason %q (want non_retryable, max_attempts or retry_window)", f.Reason)
	}
	if len(f.IDs) > MaxBatch {
		return fieldErr("ids", "has %d ids; at most %d", len(f.IDs), MaxBatch)
	}
	for i, id := range f.IDs {
		if err := ValidateID(id); err != nil {
			msg := err.Error()
			if fe, ok := errors.AsType[*FieldError](err); ok {
				msg = fe.Message
			}
			return fieldErr(fmt.Sprintf("ids[%d]", i), "%s", msg)
		}
	}
	if f.Limit < 0 {
		return fieldErr("limit", "must not be negative")
	}
	f.Now = e.now()
	return nil
}

// ListDead lists dead-lettered tasks.
func (e *Engine) ListDead(ctx context.Context, f store.DeadFilter) ([]store.Task, string, error) {
	var err error
	if f.Limit, err = checkLimit(f.Limit); err != nil {
		return nil, "", err
	}
	if f.MaxBytes, err = checkMaxBytes(f.MaxBytes); err != nil {
		return nil, "", err
	}
	if err := e.checkDeadFilter(&f); err != nil {
		return nil, "", err
	}
	return e.st.ListDead(ctx, f)
}

// DeadSummary groups the dead tasks matching p (as a DeadFilter with the
// same fields selects them) by type, error code and reason, largest group
// first: at most p.Limit groups (0: all), with the totals of all of them.
func (e *Engine) DeadSummary(ctx context.Context, p store.SummaryParams) (store.Summary, error) {
	f := store.DeadFilter{Type: p.Type, ErrorCode: p.ErrorCode, NoErrorCode: p.NoErrorCode, Reason: p.Reason,
		Since: p.Since, Limit: p.Limit}
	if err := e.checkDeadFilter(&f); err != nil {
		return store.Summary{}, err
	}
	return e.st.DeadSummary(ctx, p) // errors: "summarize dead tasks: ..." from the store
}

// Redrive puts dead tasks matching the filter back to pending. With an
// error it returns how many tasks moved before it (the PostgreSQL store
// commits a Limit's rounds one by one), logged as a success is: those
// tasks are pending again whatever the error says.
func (e *Engine) Redrive(ctx context.Context, f store.DeadFilter) (int, error) {
	if err := e.checkDeadFilter(&f); err != nil {
		return 0, err
	}
	n, err := e.st.RedriveDead(ctx, f) // errors: "redrive dead tasks: ..." from the store
	if err == nil || n > 0 {
		e.log.Info("dead tasks redriven", append([]any{"count", n}, deadFilterAttrs(f)...)...)
	}
	if n > 0 {
		e.wake.broadcast()
	}
	return n, err
}

// Purge deletes dead tasks matching the filter. With an error it returns
// how many tasks were deleted before it, logged as a success is.
func (e *Engine) Purge(ctx context.Context, f store.DeadFilter) (int, error) {
	if err := e.checkDeadFilter(&f); err != nil {
		return 0, err
	}
	n, err := e.st.PurgeDead(ctx, f) // errors: "purge dead tasks: ..." from the store
	if err == nil || n > 0 {
		e.log.Info("dead tasks purged", append([]any{"count", n}, deadFilterAttrs(f)...)...)
	}
	return n, err
}

// deadFilterAttrs are the log attributes of the filters f was given, for
// the log line of a redrive or purge: the ids are counted, not listed (a
// batch has up to MaxBatch of them). A filter without any is filter=all,
// so that the line says the whole DLQ was taken rather than leaving the
// reader to notice what is missing.
func deadFilterAttrs(f store.DeadFilter) []any {
	var a []any
	if f.Type != "" {
		a = append(a, "type", f.Type)
	}
	if f.ErrorCode != "" {
		a = append(a, "error_code", f.ErrorCode)
	}
	if f.NoErrorCode {
		a = append(a, "no_error_code", true)
	}
	if f.Reason != "" {
		a = append(a, "reason", f.Reason)
	}
	if !f.Since.IsZero() {
		a = append(a, "since", f.Since)
	}
	if !f.Before.IsZero() {
		a = append(a, "before", f.Before)
	}
	if f.IDs != nil {
		a = append(a, "id_count", len(f.IDs))
	}
	if f.Limit > 0 {
		a = append(a, "limit", f.Limit)
	}
	if a == nil {
		a = []any{"filter", "all"}
	}
	return a
}

// Stats returns per-type statistics over the last window.
func (e *Engine) Stats(ctx context.Context, window time.Duration) ([]store.TypeStats, error) {
	ss, err := e.st.Stats(ctx, store.StatsParams{Since: e.now().Add(-window)})
	if err != nil {
		return nil, fmt.Errorf("compute stats: %w", err)
	}
	return ss, nil
}
