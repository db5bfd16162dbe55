package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// taskCols are the columns scanTask reads, in order.
const taskCols = `id, type, payload, priority, effective_prio, state, attempt, max_attempts, idempotency_key,
	run_at, created_at, updated_at, first_failure_at, last_error_code, last_error_message, last_error_class,
	last_delay, dead_reason, lease_id, lease_expires_at, worker_id, started_at`

type scanner interface{ Scan(dest ...any) error }

func scanTask(sc scanner) (store.Task, error) {
	var (
		t                   store.Task
		state               string
		idem, lease         sql.NullString
		code, msg, class    sql.NullString
		runAt, created, upd int64
		ff, leaseExp, start sql.NullInt64
		delay               int64
	)
	var payload []byte
	err := sc.Scan(&t.ID, &t.Type, &payload, &t.Priority, &t.EffectivePrio, &state, &t.Attempt, &t.MaxAttempts, &idem,
		&runAt, &created, &upd, &ff, &code, &msg, &class,
		&delay, &t.DeadReason, &lease, &leaseExp, &t.WorkerID, &start)
	if err != nil {
		return store.Task{}, err
	}
	t.Payload = payload
	t.State = store.State(state)
	t.IdempotencyKey = idem.String
	t.RunAt = fromMicros(runAt)
	t.CreatedAt = fromMicros(created)
	t.UpdatedAt = fromMicros(upd)
	t.FirstFailureAt = fromTS(ff)
	if code.Valid {
		t.LastError = &store.ErrorInfo{Code: code.String, Message: msg.String, Class: class.String}
	}
	t.LastDelay = time.Duration(delay)
	t.LeaseID = lease.String
	t.LeaseExpiresAt = fromTS(leaseExp)
	t.StartedAt = fromTS(start)
	return t, nil
}

func scanTasks(rows *sql.Rows) ([]store.Task, error) {
	defer rows.Close()
	out := []store.Task{} // empty, not nil, when there is none
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// GetTask implements store.Store.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Task{}, fmt.Errorf("get task: %w", err)
	}
	op := "get task " + id
	if err := s.check(op); err != nil {
		return store.Task{}, err
	}
	t, err := scanTask(s.r.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = ?`, id))
	if err != nil {
		return store.Task{}, s.translate(op, err)
	}
	return t, nil
}

// ListAttempts implements store.Store.
func (s *Store) ListAttempts(ctx context.Context, taskID string) ([]store.Attempt, error) {
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	op := "list attempts of task " + taskID
	if err := s.check(op); err != nil {
		return nil, err
	}
	// One read transaction, so the existence check sees the same snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to keep
	rows, err := tx.QueryContext(ctx, `SELECT task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay, detail
		FROM attempts WHERE task_id = ? ORDER BY id`, taskID)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	out := []store.Attempt{}
	for rows.Next() {
		var (
			a                store.Attempt
			started          sql.NullInt64
			finished, delay  int64
			code, msg, class sql.NullString
		)
		if err := rows.Scan(&a.TaskID, &a.TaskType, &a.Number, &a.WorkerID, &started, &finished,
			&a.Outcome, &code, &msg, &class, &delay, &a.Detail); err != nil {
			return nil, s.translate(op, err)
		}
		a.StartedAt = fromTS(started)
		a.FinishedAt = fromMicros(finished)
		if code.Valid {
			a.Error = &store.ErrorInfo{Code: code.String, Message: msg.String, Class: class.String}
		}
		a.Delay = time.Duration(delay)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	// The task row, read in the same snapshot: it must exist, and when it
	// succeeded it holds the final attempt, which has no attempts row.
	var (
		state, typ, worker, detail string
		number                     int
		started                    sql.NullInt64
		updated, delay             int64
	)
	if err := tx.QueryRowContext(ctx, `SELECT state, type, attempt, worker_id, started_at, updated_at, last_delay, success_detail
		FROM tasks WHERE id = ?`, taskID).Scan(&state, &typ, &number, &worker, &started, &updated, &delay, &detail); err != nil {
		return nil, s.translate(op, err)
	}
	if store.State(state) == store.StateSucceeded {
		out = append(out, store.Attempt{TaskID: taskID, TaskType: typ, Number: number, WorkerID: worker,
			StartedAt: fromTS(started), FinishedAt: fromMicros(updated), Outcome: store.OutcomeSucceeded,
			Delay: time.Duration(delay), Detail: detail})
	}
	return out, nil
}

// ListTasks implements store.Store. The cursor is the id of the last task
// of the previous page. A filter on states that each have an index
// reads those indexes (listPage); any other filter walks the primary key.
func (s *Store) ListTasks(ctx context.Context, p store.ListParams) ([]store.Task, string, error) {
	const op = "list tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if p.Limit <= 0 {
		return nil, "", fmt.Errorf("%s: %w: Limit must be positive", op, store.ErrInvalid)
	}
	if err := store.CheckCursor(p.Cursor); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	var states []store.State
	seen := map[store.State]bool{} // repeats add nothing (and could pass SQLite's variable limit)
	for _, st := range p.States {
		if !st.Valid() {
			return nil, "", fmt.Errorf("%s: %w: unknown state %q", op, store.ErrInvalid, st)
		}
		if !seen[st] {
			seen[st] = true
			states = append(states, st)
		}
	}
	if indexedStates(states) {
		q, args := listPage(states, p.Type, p.Cursor, p.Limit)
		return s.page(ctx, op, q, args, p.Limit, p.MaxBytes)
	}
	var where []string
	var args []any
	if p.Type != "" {
		where = append(where, "type = ?")
		args = append(args, p.Type)
	}
	if len(states) > 0 {
		where = append(where, "state IN ("+inList(len(states))+")")
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	if p.Cursor != "" {
		where = append(where, "id < ?")
		args = append(args, p.Cursor)
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	q, args := walkPage(cond, args, p.Limit)
	return s.page(ctx, op, q, args, p.Limit, p.MaxBytes)
}

// walkPage returns the common table expression page(pid, size) of page
// for the tasks that the conditions cond (" WHERE ..." or "") select: the
// limit+1 newest, read by walking the primary key down from the newest
// id, with its arguments.
func walkPage(cond string, args []any, limit int) (string, []any) {
	return `page(pid, size) AS (SELECT id, coalesce(length(payload), 0) FROM tasks` + cond + `
			ORDER BY id DESC LIMIT ?)`, append(args, candidates(limit))
}

// candidates is how many tasks a page of limit tasks reads: one more
// tells whether more follow. The largest limit cannot have one more (it
// would wrap around to a negative count).
func candidates(limit int) int {
	return min(limit, math.MaxInt-1) + 1
}

// page lists the tasks that the common table expression pageCTE selects,
// newest id first: pageCTE defines page(pid, size), the ids and payload
// sizes of the limit+1 candidates, and args are its arguments. It returns
// at most limit tasks, and only as many as fit in maxBytes of payload
// (0 = no bound), but at least one, and the cursor of the next page: the
// id of the page's last task when more follow. The payload sizes are
// summed in SQL over the candidates, so that the payloads of the tasks
// past the cut are never read.
func (s *Store) page(ctx context.Context, op, pageCTE string, args []any, limit, maxBytes int) ([]store.Task, string, error) {
	if maxBytes < 0 {
		return nil, "", fmt.Errorf("%s: %w: MaxBytes must not be negative", op, store.ErrInvalid)
	}
	bound := int64(math.MaxInt64)
	if maxBytes > 0 {
		bound = int64(maxBytes)
	}
	// run has each candidate's place, the payload bytes up to and
	// including it, and how many candidates there are. length() of a BLOB
	// reads no overflow pages.
	q := `WITH ` + pageCTE + `,
		run(rid, n, total, found) AS (SELECT pid, row_number() OVER w, sum(size) OVER w, count(*) OVER ()
			FROM page WINDOW w AS (ORDER BY pid DESC ROWS UNBOUNDED PRECEDING))
		SELECT ` + taskCols + `, found FROM run JOIN tasks ON id = rid WHERE n = 1 OR total <= ?`
	args = append(args, bound)
	if err := s.check(op); err != nil {
		return nil, "", err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", s.translate(op, err)
	}
	ts, found, err := scanPage(rows)
	if err != nil {
		return nil, "", s.translate(op, err)
	}
	// Sorted here, not by SQLite, which would copy the payloads into a
	// sorter: ids are BINARY text, in Go's byte order.
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID > ts[j].ID })
	if len(ts) > limit {
		ts = ts[:limit]
	}
	if len(ts) < found {
		return ts, ts[len(ts)-1].ID, nil
	}
	return ts, "", nil
}

// scanPage scans the rows of page's query: tasks followed by the count of
// candidates.
func scanPage(rows *sql.Rows) ([]store.Task, int, error) {
	defer rows.Close()
	ts := []store.Task{}
	found := 0
	for rows.Next() {
		t, err := scanTask(pageRow{rows, &found})
		if err != nil {
			return nil, 0, err
		}
		ts = append(ts, t)
	}
	return ts, found, rows.Err()
}

// pageRow scans a task row that has one more column, the candidates'
// count, into found.
type pageRow struct {
	rows  *sql.Rows
	found *int
}

// Scan implements scanner.
func (r pageRow) Scan(dest ...any) error {
	return r.rows.Scan(append(dest, r.found)...)
}

// queryTasks runs a read query returning task rows on the read pool.
func (s *Store) queryTasks(ctx context.Context, op, q string, args ...any) ([]store.Task, error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.translate(op, err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return nil, s.translate(op, err)
	}
	if ts == nil {
		ts = []store.Task{}
	}
	return ts, nil
}
