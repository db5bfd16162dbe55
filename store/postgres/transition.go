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
	return s.transition(ctx, op, "cancel", p.ID, `
UPDATE tasks AS t SET state = 'cancelled', lease_id = NULL, lease_expires_at = NULL, updated_at = $2
WHERE t.id = $1 AND t.state IN ('scheduled', 'pending', 'retry_waiting', 'running')
RETURNING `+taskCols, false, p.ID, us(p.Now))
}

// retrySet is the SET list that puts a dead or cancelled task back to
// pending ($1 = now).
const retrySet = `state = 'pending', attempt = 0, last_error_code = NULL, last_error_message = NULL,
	last_error_class = NULL, first_failure_at = NULL, dead_reason = '', last_delay_ns = 0,
	effective_prio = t.priority, run_at = $1, lease_id = NULL, lease_expires_at = NULL, updated_at = $1`

// RetryTask puts a dead or cancelled task back to pending.
func (s *Store) RetryTask(ctx context.Context, p store.RetryParams) (store.Task, error) {
	op := "retry task " + p.ID
	if p.ID == "" {
		return store.Task{}, fmt.Errorf("retry task: empty id: %w", store.ErrInvalid)
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
		t, err = scanTask(tx.QueryRow(ctx, sql, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			var state string
			if err := tx.QueryRow(ctx, "SELECT state FROM tasks WHERE id = $1", id).Scan(&state); err != nil {
				return err // ErrNoRows -> ErrNotFound
			}
			return &store.ConflictError{ID: id, State: store.State(state), Op: verb}
		}
		if err != nil {
			return err
		}
		if notify {
			return s.notify(ctx, tx)
		}
		return nil
	})
	return t, err
}
