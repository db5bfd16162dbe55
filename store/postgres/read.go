package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("get task: %w", err)
	}
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
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
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
// id of the previous page. A filter on states that each have an index
// reads those indexes (listPage); any other filter walks the primary key.
func (s *Store) ListTasks(ctx context.Context, p store.ListParams) ([]store.Task, string, error) {
	const op = "list tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
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
	var states []store.State
	for _, st := range p.States {
		if !st.Valid() {
			return nil, "", fmt.Errorf("%s: unknown state %q: %w", op, st, store.ErrInvalid)
		}
		if !slices.Contains(states, st) {
			states = append(states, st)
		}
	}
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return nil, "", werr
	}
	defer end()
	if indexedStates(states) {
		q, args := listPage(states, p.Type, p.Cursor, p.Limit)
		return s.page(ctx, op, listSettings, q, args, p.Limit, p.MaxBytes)
	}
	q, args := listWalk(states, p.Type, p.Cursor, p.Limit)
	return s.page(ctx, op, walkPlanSettings, q, args, p.Limit, p.MaxBytes)
}

// listWalk returns the common table expression page(pid, size) of page
// for the tasks below cursor ("" = none) in the given states (none = any)
// and of type typ ("" = any), read by walking the primary key (run under
// walkPlanSettings), with its arguments.
func listWalk(states []store.State, typ, cursor string, limit int) (string, []any) {
	conds := []string{"true"}
	var args []any
	if typ != "" {
		args = append(args, typ)
		conds = append(conds, "t.type = $"+strconv.Itoa(len(args)))
	}
	if len(states) > 0 {
		names := make([]string, len(states))
		for i, st := range states {
			names[i] = string(st)
		}
		args = append(args, names)
		// Compared under "POSIX" (byte order, as "C"), a collation no
		// index of state has: the planner cannot read the states through
		// tasks_finished_idx and sort, which it prefers when it has no
		// statistics (757 ms for the newest succeeded tasks of 1M rows
		// after a bulk load); the walk finds them at once.
		conds = append(conds, `t.state COLLATE "POSIX" = ANY($`+strconv.Itoa(len(args))+`)`)
	}
	if cursor != "" {
		args = append(args, cursor)
		conds = append(conds, "t.id < $"+strconv.Itoa(len(args)))
	}
	return walkPage(strings.Join(conds, " AND "), args, limit)
}

// walkPlanSettings keep ListTasks' walk of the primary key a walk: without
// statistics (right after a bulk load), a type and a state together look
// so rare to the planner that it would rather read the whole table and
// sort it (250 ms for the newest succeeded tasks of a type among 1M
// rows), or walk it with parallel workers (50 ms), where one walk finds
// them at once. SET LOCAL holds for the batch's implicit transaction, as
// for the fetch. The walk's estimated cost, a whole table's, would soon
// pass jit_above_cost too: JIT is off (listSettings).
const walkPlanSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true)`

// listSettings are the settings of the listings that read the states'
// indexes (listPage): a listing returns a page of tasks, and no page is
// worth starting parallel workers or compiling a query.
const listSettings = `SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true)`

// walkPage returns the common table expression page(pid, size) of page
// for the tasks (aliased t) that the condition cond selects: the limit+1
// newest, read by walking the primary key down from the newest id, with
// its arguments.
func walkPage(cond string, args []any, limit int) (string, []any) {
	args = append(args, candidates(limit))
	return `page AS (
	SELECT t.id AS pid, coalesce(octet_length(t.payload), 0) AS size FROM tasks t
	WHERE ` + cond + `
	ORDER BY t.id DESC LIMIT $` + strconv.Itoa(len(args)) + `
)`, args
}

// page lists the tasks that the common table expression pageCTE selects,
// newest id first: pageCTE defines page(pid, size), the ids and payload
// sizes of the limit+1 candidates, and args are its arguments; settings,
// unless "", is a statement run first in the same transaction. It returns
// at most limit tasks, and only as many as fit in maxBytes of payload
// (0 = no bound), but at least one, and the cursor of the next page: the
// id of the page's last task when more follow. The payload sizes are
// summed over the candidates (octet_length of a bytea reads no TOAST), so
// that the payloads of the tasks past the cut are never read.
func (s *Store) page(ctx context.Context, op, settings, pageCTE string, args []any, limit, maxBytes int) ([]store.Task, string, error) {
	if maxBytes < 0 {
		return nil, "", fmt.Errorf("%s: MaxBytes must not be negative (got %d): %w", op, maxBytes, store.ErrInvalid)
	}
	bound := int64(math.MaxInt64)
	if maxBytes > 0 {
		bound = int64(maxBytes)
	}
	args = append(args, bound)
	// run has each candidate's place, the payload bytes up to and
	// including it, and how many candidates there are.
	b := &pgx.Batch{}
	if settings != "" {
		b.Queue(settings)
	}
	b.Queue(pageSQL(pageCTE, len(args)), args...)
	var tasks []store.Task
	var found int
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		if settings != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		tasks, found, err = scanPage(rows)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if len(tasks) > limit {
		tasks = tasks[:limit]
	}
	if len(tasks) < found {
		return tasks, tasks[len(tasks)-1].ID, nil
	}
	return tasks, "", nil
}

// candidates is how many tasks a page of limit tasks reads: one more
// tells whether more follow. The largest limit cannot have one more (it
// wrapped to a negative LIMIT, which the server refuses).
func candidates(limit int) int {
	return min(limit, math.MaxInt-1) + 1
}

// pageSQL is page's statement over pageCTE, with the byte bound as its
// parameter number bound.
func pageSQL(pageCTE string, bound int) string {
	return `WITH ` + pageCTE + `, run AS (
	SELECT pid, row_number() OVER w AS n, sum(size) OVER w AS total, count(*) OVER () AS found
	FROM page WINDOW w AS (ORDER BY pid DESC ROWS UNBOUNDED PRECEDING)
)
SELECT ` + taskCols + `, run.found FROM run JOIN tasks t ON t.id = run.pid
WHERE run.n = 1 OR run.total <= $` + strconv.Itoa(bound) + `
ORDER BY t.id DESC`
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
