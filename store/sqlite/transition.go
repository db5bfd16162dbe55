package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/retryq/retryq/store"
)

// transition runs a conditional single-task update (RETURNING taskCols); when
// it matches no row it reports ErrNotFound or a *ConflictError naming the
// current state.
func (s *Store) transition(ctx context.Context, op, verb, id, q string, args ...any) (store.Task, error) {
	var t store.Task
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, q)
		if err != nil {
			return err
		}
		t, err = scanTask(st.QueryRowContext(ctx, args...))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM tasks WHERE id = ?`, id).Scan(&state); err != nil {
			return err
		}
		return &store.ConflictError{ID: id, State: store.State(state), Op: verb}
	})
	return t, err
}

// CancelTask implements store.Store.
func (s *Store) CancelTask(ctx context.Context, p store.CancelParams) (store.Task, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("cancel task: %w", err)
	}
	if p.ID == "" {
		return store.Task{}, fmt.Errorf("cancel task: empty id: %w", store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Task{}, fmt.Errorf("cancel task %s: %w", p.ID, err)
	}
	return s.transition(ctx, "cancel task "+p.ID, "cancel", p.ID, `UPDATE tasks SET state = 'cancelled',
		lease_id = NULL, lease_expires_at = NULL, updated_at = ?
		WHERE id = ? AND state IN ('scheduled', 'pending', 'retry_waiting', 'running')
		RETURNING `+taskCols, p.Now.UnixMicro(), p.ID)
}

// retrySet is the SET clause that puts a dead or cancelled task back to
// pending as if new (parameter ?1 is now); the history is kept.
const retrySet = `state = 'pending', attempt = 0, effective_prio = priority, run_at = ?1, updated_at = ?1,
	first_failure_at = NULL, last_error_code = NULL, last_error_message = NULL, last_error_class = NULL,
	last_delay = 0, dead_reason = '', lease_id = NULL, lease_expires_at = NULL, worker_id = '', started_at = NULL`

// RetryTask implements store.Store.
func (s *Store) RetryTask(ctx context.Context, p store.RetryParams) (store.Task, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("retry task: %w", err)
	}
	if p.ID == "" {
		return store.Task{}, fmt.Errorf("retry task: empty id: %w", store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Task{}, fmt.Errorf("retry task %s: %w", p.ID, err)
	}
	return s.transition(ctx, "retry task "+p.ID, "retry", p.ID, `UPDATE tasks SET `+retrySet+`
		WHERE id = ?2 AND state IN ('dead', 'cancelled')
		RETURNING `+taskCols, p.Now.UnixMicro(), p.ID)
}
