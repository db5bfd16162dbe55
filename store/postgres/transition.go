package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// CancelTask cancels a non-terminal task.
func (s *Store) CancelTask(ctx context.Context, p store.CancelParams) (store.Task, error) {
	op := "cancel task " + p.ID
	if p.ID == "" {
		return store.Task{}, fmt.Errorf("cancel task: empty id: %w", store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Task{}, fmt.Errorf("%s: %w", op, err)
	}
	if !store.ValidText(p.ID) { // no task has such an id
		if err := s.check(op); err != nil {
			return store.Task{}, err
		}
		return store.Task{}, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var t store.Task
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		// The lease of a running task, read under the row lock the update
		// takes anyway, names the handler to stop in the notification.
		var lease *string
		if err := tx.QueryRow(ctx, "SELECT lease_id FROM tasks WHERE id = $1 FOR UPDATE", p.ID).Scan(&lease); err != nil {
			return err // ErrNoRows -> ErrNotFound
		}
		var err error
		t, err = conditional(ctx, tx, "cancel", p.ID, `
UPDATE tasks AS t SET state = 'cancelled', lease_id = NULL, lease_expires_at = NULL, updated_at = $2
WHERE t.id = $1 AND t.state IN ('scheduled', 'pending', 'retry_waiting', 'running')
RETURNING `+taskCols, p.ID, us(p.Now))
		if err != nil || lease == nil || s.cfg.PollOnly {
			return err
		}
		payload, ok := cancelPayload(p.ID, *lease)
		if !ok {
			return nil // too long to notify: the handler's next heartbeat finds the lease gone
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, payload)
		return err
	})
	return t, err
}

// retrySet is the SET list that puts a dead or cancelled task back to
// pending ($1 = now).
const retrySet = `state = 'pending', attempt = 0, last_error_code = NULL, last_error_message = NULL,
	last_error_class = NULL, first_failure_at = NULL, dead_reason = '', last_delay_ns = 0,
	effective_prio = t.priority, run_at = $1, lease_id = NULL, lease_expires_at = NULL, worker_id = '',
	started_at = NULL, updated_at = $1`

// RetryTask puts a dead or cancelled task back to pending.
func (s *Store) RetryTask(ctx context.Context, p store.RetryParams) (store.Task, error) {
	op := "retry task " + p.ID
	if p.ID == "" {
		return store.Task{}, fmt.Errorf("retry task: empty id: %w", store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Task{}, fmt.Errorf("%s: %w", op, err)
	}
	if !store.ValidText(p.ID) { // no task has such an id
		if err := s.check(op); err != nil {
			return store.Task{}, err
		}
		return store.Task{}, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	return s.transition(ctx, op, "retry", p.ID, `
UPDATE tasks AS t SET `+retrySet+`
WHERE t.id = $2 AND t.state IN ('dead', 'cancelled')
RETURNING `+taskCols, true, us(p.Now), p.ID)
}

// transition runs a conditional single-task update; when it matches no row
// it reports ErrNotFound or a *ConflictError naming the current state.
func (s *Store) transition(ctx context.Context, op, verb, id, sql string, notify bool, args ...any) (store.Task, error) {
	var t store.Task
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		var err error
		if t, err = conditional(ctx, tx, verb, id, sql, args...); err != nil {
			return err
		}
		if notify {
			return s.notify(ctx, tx)
		}
		return nil
	})
	return t, err
}

// conditional runs one conditional single-task update in tx.
func conditional(ctx context.Context, tx pgx.Tx, verb, id, sql string, args ...any) (store.Task, error) {
	t, err := scanTask(tx.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		if err := tx.QueryRow(ctx, "SELECT state FROM tasks WHERE id = $1", id).Scan(&state); err != nil {
			return store.Task{}, err // ErrNoRows -> ErrNotFound
		}
		return store.Task{}, &store.ConflictError{ID: id, State: store.State(state), Op: verb}
	}
	return t, err
}
