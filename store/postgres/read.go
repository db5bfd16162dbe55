package postgres

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// taskCols is the column list scanned by scanTask, qualified with "t.".
const taskCols = `t.id, t.type, t.payload, t.priority, t.effective_prio, t.state, t.attempt,
	t.max_attempts, t.idempotency_key, t.run_at, t.created_at, t.updated_at, t.first_failure_at,
	t.last_error_code, t.last_error_message, t.last_error_class, t.last_delay_ns, t.dead_reason,
	t.lease_id, t.lease_expires_at, t.worker_id, t.started_at`

func scanTask(row pgx.Row) (store.Task, error) {
	var (
		t                          store.Task
		payload                    []byte
		state                      string
		key, leaseID               *string
		errCode, errMsg, errClass  *string
		firstFail, leaseExp, start *time.Time
		lastDelay                  int64
	)
	err := row.Scan(&t.ID, &t.Type, &payload, &t.Priority, &t.EffectivePrio, &state, &t.Attempt,
		&t.MaxAttempts, &key, &t.RunAt, &t.CreatedAt, &t.UpdatedAt, &firstFail,
		&errCode, &errMsg, &errClass, &lastDelay, &t.DeadReason,
		&leaseID, &leaseExp, &t.WorkerID, &start)
	if err != nil {
		return t, err
	}
	if payload != nil {
		t.Payload = payload
	}
	t.State = store.State(state)
	if key != nil {
		t.IdempotencyKey = *key
	}
	t.RunAt, t.CreatedAt, t.UpdatedAt = t.RunAt.UTC(), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	t.FirstFailureAt = fromNull(firstFail)
	t.LastError = errorInfo(errCode, errMsg, errClass)
	t.LastDelay = time.Duration(lastDelay)
	if leaseID != nil {
		t.LeaseID = *leaseID
	}
	t.LeaseExpiresAt = fromNull(leaseExp)
	t.StartedAt = fromNull(start)
	return t, nil
}

func errorInfo(code, msg, class *string) *store.ErrorInfo {
	if code == nil {
		return nil
	}
	e := &store.ErrorInfo{Code: *code}
	if msg != nil {
		e.Message = *msg
	}
	if class != nil {
		e.Class = *class
	}
	return e
}

func collectTasks(rows pgx.Rows) ([]store.Task, error) {
	defer rows.Close()
	var out []store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// GetTask returns one task.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	op := "get task " + id
	if err := s.check(op); err != nil {
		return store.Task{}, err
	}
	if !store.ValidText(id) {
		return store.Task{}, fmt.Errorf("%s: %w", op, store.ErrNotFound) // no task has such an id
	}
	t, err := scanTask(s.pool.QueryRow(ctx, "SELECT "+taskCols+" FROM tasks t WHERE t.id = $1", id))
	if err != nil {
		return store.Task{}, translate(op, err)
	}
	return t, nil
}

// ListAttempts returns a task's history in order.
func (s *Store) ListAttempts(ctx context.Context, taskID string) ([]store.Attempt, error) {
	op := "list attempts of task " + taskID
	if err := s.check(op); err != nil {
		return nil, err
	}
	if !store.ValidText(taskID) {
		return nil, fmt.Errorf("%s: %w", op, store.ErrNotFound) // no task has such an id
	}
	var out []store.Attempt
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		// One snapshot for both reads: an outcome committed between them
		// would otherwise show an attempt the task row does not know yet,
		// or hide a success that only the task row holds.
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
			return err
		}
		// The task row, in the same transaction: it must exist, and when it
		// succeeded it holds the final attempt, which has no attempts row.
		var (
			state, typ, worker, detail string
			number                     int
			started                    *time.Time
			updated                    time.Time
			delay                      int64
		)
		err := tx.QueryRow(ctx, `SELECT state, type, attempt, worker_id, started_at, updated_at, last_delay_ns, success_detail
FROM tasks WHERE id = $1`, taskID).Scan(&state, &typ, &number, &worker, &started, &updated, &delay, &detail)
		if err != nil {
			return err // ErrNoRows: translated to ErrNotFound
		}
		rows, err := tx.Query(ctx, `SELECT task_id, task_type, number, worker_id, started_at, finished_at,
	outcome, error_code, error_message, error_class, delay_ns, detail
FROM attempts WHERE task_id = $1 ORDER BY seq`, taskID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a                         store.Attempt
				started                   *time.Time
				errCode, errMsg, errClass *string
				delay                     int64
			)
			if err := rows.Scan(&a.TaskID, &a.TaskType, &a.Number, &a.WorkerID, &started, &a.FinishedAt,
				&a.Outcome, &errCode, &errMsg, &errClass, &delay, &a.Detail); err != nil {
				return err
			}
			a.StartedAt = fromNull(started)
			a.FinishedAt = a.FinishedAt.UTC()
			a.Error = errorInfo(errCode, errMsg, errClass)
			a.Delay = time.Duration(delay)
			out = append(out, a)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if store.State(state) == store.StateSucceeded {
			out = append(out, store.Attempt{TaskID: taskID, TaskType: typ, Number: number, WorkerID: worker,
				StartedAt: fromNull(started), FinishedAt: updated.UTC(), Outcome: store.OutcomeSucceeded,
				Delay: time.Duration(delay), Detail: detail})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []store.Attempt{}
	}
	return out, nil
}

// ListTasks returns a page of tasks, newest id first. The cursor is the last
// id of the previous page.
func (s *Store) ListTasks(ctx context.Context, p store.ListParams) ([]store.Task, string, error) {
	const op = "list tasks"
	if err := s.check(op); err != nil {
		return nil, "", err
	}
	if p.Limit <= 0 {
		return nil, "", fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	if err := store.CheckCursor(p.Cursor); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if !store.ValidText(p.Type) {
		return []store.Task{}, "", nil // no task has such a type
	}
	var states []string
	for _, st := range p.States {
		if !st.Valid() {
			return nil, "", fmt.Errorf("%s: unknown state %q: %w", op, st, store.ErrInvalid)
		}
		states = append(states, string(st))
	}
	return s.page(ctx, op, `($1 = '' OR t.type = $1)
	AND ($2::text[] IS NULL OR t.state = ANY($2))
	AND ($3 = '' OR t.id < $3)`, []any{p.Type, states, p.Cursor}, p.Limit, p.MaxBytes)
}

// page lists the tasks (aliased t) that the condition cond selects, newest
// id first: at most limit, and only as many as fit in maxBytes of payload
// (0 = no bound), but at least one. It returns the cursor of the next
// page: the id of the page's last task when more follow. The payload sizes
// are summed over the ids of the limit+1 candidates (octet_length of a
// bytea reads no TOAST), so that the payloads of the tasks past the cut
// are never read.
func (s *Store) page(ctx context.Context, op, cond string, args []any, limit, maxBytes int) ([]store.Task, string, error) {
	if maxBytes < 0 {
		return nil, "", fmt.Errorf("%s: MaxBytes must not be negative (got %d): %w", op, maxBytes, store.ErrInvalid)
	}
	bound := int64(math.MaxInt64)
	if maxBytes > 0 {
		bound = int64(maxBytes)
	}
	// One candidate more than the page tells whether more follow; the
	// largest limit cannot have one more (it wrapped to a negative LIMIT).
	args = append(args, min(limit, math.MaxInt-1)+1, bound)
	n := len(args)
	// run has each candidate's place, the payload bytes up to and
	// including it, and how many candidates there are.
	rows, err := s.pool.Query(ctx, `WITH page AS (
	SELECT t.id AS pid, coalesce(octet_length(t.payload), 0) AS size FROM tasks t
	WHERE `+cond+`
	ORDER BY t.id DESC LIMIT $`+strconv.Itoa(n-1)+`
), run AS (
	SELECT pid, row_number() OVER w AS n, sum(size) OVER w AS total, count(*) OVER () AS found
	FROM page WINDOW w AS (ORDER BY pid DESC ROWS UNBOUNDED PRECEDING)
)
SELECT `+taskCols+`, run.found FROM run JOIN tasks t ON t.id = run.pid
WHERE run.n = 1 OR run.total <= $`+strconv.Itoa(n)+`
ORDER BY t.id DESC`, args...)
	if err != nil {
		return nil, "", translate(op, err)
	}
	tasks, found, err := scanPage(rows)
	if err != nil {
		return nil, "", translate(op, err)
	}
	if len(tasks) > limit {
		tasks = tasks[:limit]
	}
	if len(tasks) < found {
		return tasks, tasks[len(tasks)-1].ID, nil
	}
	return tasks, "", nil
}

// scanPage scans the rows of page's query: tasks followed by the count of
// candidates.
func scanPage(rows pgx.Rows) ([]store.Task, int, error) {
	defer rows.Close()
	tasks := []store.Task{}
	var found int64
	for rows.Next() {
		t, err := scanTask(pageRow{rows, &found})
		if err != nil {
			return nil, 0, err
		}
		tasks = append(tasks, t)
	}
	return tasks, int(found), rows.Err()
}

// pageRow scans a task row that has one more column, the candidates'
// count, into found.
type pageRow struct {
	pgx.Rows
	found *int64
}

// Scan implements pgx.Row.
func (r pageRow) Scan(dest ...any) error {
	return r.Rows.Scan(append(dest, r.found)...)
}
