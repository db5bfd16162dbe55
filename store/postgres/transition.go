package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// CancelTask cancels a non-terminal task.
func (s *Store) CancelTask(ctx context.Context, p store.CancelParams) (store.Task, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("cancel task: %w", err)
	}
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
	if s.cfg.PollOnly {
		return s.transition(ctx, op, "cancel", p.ID, cancellable, cancelSQL+`
SELECT `+taskCols+` FROM upd AS t`, p.ID, us(p.Now))
	}
	// The notification names the handler to stop: its payload is the
	// prefix given here and the lease (cancelPayload); a payload too long
	// to notify is not sent, the handler's next heartbeat finds the lease
	// gone.
	prefix, _ := cancelPayload(p.ID, "")
	return s.transition(ctx, op, "cancel", p.ID, cancellable, cancelSQL+`, woke AS MATERIALIZED (
	SELECT pg_notify(`+notifyChannelSQL+`, $3::text || upd.old_lease) FROM upd
	WHERE upd.old_lease IS NOT NULL AND octet_length($3::text || upd.old_lease) <= `+strconv.Itoa(maxNotifyPayload)+`
)
SELECT `+taskCols+` FROM upd AS t, (SELECT count(*) FROM woke) AS w`, p.ID, us(p.Now), prefix)
}

// cancelSQL starts the statement that cancels task $1 at $2: the task's
// lease, read under the row lock the update takes anyway, names the
// handler to stop in the notification (upd.old_lease).
const cancelSQL = `
WITH old AS MATERIALIZED (
	SELECT id, lease_id FROM tasks WHERE id = $1 FOR UPDATE
), upd AS (
	UPDATE tasks AS t SET state = 'cancelled', lease_id = NULL, lease_expires_at = NULL, updated_at = $2
	FROM old
	WHERE t.id = old.id AND t.state IN ('scheduled', 'pending', 'retry_waiting', 'running')
	RETURNING t.*, old.lease_id AS old_lease
)`

// cancellable and retryable are the states that cancelSQL and RetryTask's
// update accept.
var (
	cancellable = []store.State{store.StateScheduled, store.StatePending, store.StateRetryWaiting, store.StateRunning}
	retryable   = []store.State{store.StateDead, store.StateCancelled}
)

// retrySet is the SET list that puts a dead or cancelled task back to
// pending ($1 = now).
const retrySet = `state = 'pending', attempt = 0, last_error_code = NULL, last_error_message = NULL,
	last_error_class = NULL, first_failure_at = NULL, dead_reason = '', last_delay_ns = 0,
	effective_prio = t.priority, run_at = $1, lease_id = NULL, lease_expires_at = NULL, worker_id = '',
	started_at = NULL, updated_at = $1`

// RetryTask puts a dead or cancelled task back to pending.
func (s *Store) RetryTask(ctx context.Context, p store.RetryParams) (store.Task, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("retry task: %w", err)
	}
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
	return s.transition(ctx, op, "retry", p.ID, retryable, s.woken(`
UPDATE tasks AS t SET `+retrySet+`
WHERE t.id = $2 AND t.state IN ('dead', 'cancelled')`), us(p.Now), p.ID)
}

// woken turns update, an UPDATE of tasks AS t without RETURNING, into a
// statement that returns the updated tasks and, unless PollOnly, sends a
// wake-up (at commit) when it updated any. The cross join with the one-row
// count makes the statement evaluate woke; its count is not read.
func (s *Store) woken(update string) string {
	if s.cfg.PollOnly {
		return update + "\nRETURNING " + taskCols
	}
	return `
WITH upd AS (` + update + `
RETURNING t.*
), woke AS MATERIALIZED (
	SELECT pg_notify(` + notifyChannelSQL + `, '') WHERE EXISTS (SELECT 1 FROM upd)
)
SELECT ` + taskCols + ` FROM upd AS t, (SELECT count(*) FROM woke) AS w`
}

// transition runs sql, a conditional single-task update that returns the
// task's row when it applies, and reads the task's state after it. When
// the update matches no row it reports ErrNotFound or a *ConflictError
// naming the current state.
//
// Both statements go as one batch (one implicit transaction, sent at once)
// rather than in an explicit transaction: the update commits on the
// server, and its row lock goes, whatever becomes of the reply. In an
// explicit transaction, a node whose network path is cut (or whose process
// is stopped) before the COMMIT would leave its session idle in it,
// holding the task's row lock, and every other write to the task would
// wait until the server noticed the dead peer (hours).
//
// The update judges the row by the version its statement's snapshot saw
// (READ COMMITTED rechecks only rows that version let through), and the
// read, a statement of its own, sees what committed since: a write that
// committed in between (the update waited for its row lock, or it came
// between the two statements) may have left a state in from, the states
// the update accepts, or a task inserted after the update's snapshot. The
// batch is then sent again rather than a conflict reported that names a
// state the verb accepts; each round needs another write committing in
// that window, so maxTransitionRounds is plenty.
func (s *Store) transition(ctx context.Context, op, verb, id string, from []store.State, sql string, args ...any) (store.Task, error) {
	for round := 1; ; round++ {
		t, state, err := s.transitionRound(ctx, op, sql, id, args)
		switch {
		case err != nil:
			return store.Task{}, s.noted(err)
		case state == "":
			return t, nil
		case !slices.Contains(from, state):
			return store.Task{}, fmt.Errorf("%s: %w", op, &store.ConflictError{ID: id, State: state, Op: verb})
		case round == maxTransitionRounds:
			return store.Task{}, fmt.Errorf("%s: task changed state under the update %d times (now %s): %w", op, round, state, store.ErrUnavailable)
		}
	}
}

// maxTransitionRounds bounds the rounds of transition.
const maxTransitionRounds = 4

// transitionRound sends sql and the state read in one batch. It returns
// the updated task, or the task's state when the update did not apply.
func (s *Store) transitionRound(ctx context.Context, op, sql, id string, args []any) (store.Task, store.State, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("SELECT state FROM tasks WHERE id = $1", id)
	var (
		t     store.Task
		state string
	)
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		var err error
		t, err = scanTask(br.QueryRow())
		applied := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := br.QueryRow().Scan(&state); err != nil {
			return err // ErrNoRows -> ErrNotFound
		}
		if applied {
			state = ""
		}
		return nil
	})
	if err != nil {
		return store.Task{}, "", err
	}
	return t, store.State(state), nil
}
