package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
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

func errorArgs(e *store.ErrorInfo) (code, msg, class any) {
	if e == nil {
		return nil, nil, nil
	}
	return e.Code, e.Message, e.Class
}

// InsertTasks implements store.Store.
func (s *Store) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	const op = "insert tasks"
	if len(p.Tasks) == 0 {
		return nil, s.check(op)
	}
	if p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: zero Now", op, store.ErrInvalid)
	}
	now := p.Now.UnixMicro()
	var keys []any
	for i, nt := range p.Tasks {
		if nt.ID == "" || nt.Type == "" {
			return nil, fmt.Errorf("%s: task %d: %w: empty id or type", op, i, store.ErrInvalid)
		}
		if nt.IdempotencyKey != "" {
			keys = append(keys, nt.IdempotencyKey)
		}
	}
	results := make([]store.InsertResult, len(p.Tasks))
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		// Existing tasks holding one of the batch's idempotency keys. The
		// write lock is held since BEGIN IMMEDIATE, so none can appear
		// between this read and the insert.
		existing := make(map[string]store.Task)
		for len(keys) > 0 {
			n := min(len(keys), maxVars)
			rows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE idempotency_key IN (`+inList(n)+`)`, keys[:n]...)
			if err != nil {
				return err
			}
			ts, err := scanTasks(rows)
			if err != nil {
				return err
			}
			for _, t := range ts {
				existing[t.IdempotencyKey] = t
			}
			keys = keys[n:]
		}
		const cols = 16
		args := make([]any, 0, cols*len(p.Tasks))
		for i, nt := range p.Tasks {
			if nt.IdempotencyKey != "" {
				if t, ok := existing[nt.IdempotencyKey]; ok {
					results[i] = store.InsertResult{Task: t, Duplicate: true}
					continue
				}
			}
			runAt := nt.RunAt
			if runAt.IsZero() {
				runAt = p.Now
			}
			state := store.StatePending
			if runAt.After(p.Now) {
				state = store.StateScheduled
			}
			t := store.Task{
				ID: nt.ID, Type: nt.Type, Payload: nt.Payload, Priority: nt.Priority, EffectivePrio: nt.Priority,
				State: state, MaxAttempts: nt.MaxAttempts, IdempotencyKey: nt.IdempotencyKey,
				RunAt: fromMicros(runAt.UnixMicro()), CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now),
			}
			var leaseID, leaseExp, startedAt any
			if nt.Lease != nil && state == store.StatePending {
				t.State, t.Attempt = store.StateRunning, 1
				t.LeaseID, t.WorkerID = nt.Lease.LeaseID, nt.Lease.WorkerID
				t.LeaseExpiresAt = fromMicros(p.Now.Add(nt.Lease.Duration).UnixMicro())
				t.StartedAt = fromMicros(now)
				leaseID, leaseExp, startedAt = t.LeaseID, t.LeaseExpiresAt.UnixMicro(), now
			}
			results[i] = store.InsertResult{Task: t}
			if nt.IdempotencyKey != "" {
				existing[nt.IdempotencyKey] = t // later duplicates in this batch
			}
			args = append(args, t.ID, t.Type, blob(t.Payload), t.Priority, t.EffectivePrio, string(t.State),
				t.MaxAttempts, nullStr(t.IdempotencyKey), runAt.UnixMicro(), now, now,
				t.Attempt, leaseID, leaseExp, t.WorkerID, startedAt)
		}
		return s.insertRows(ctx, tx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state,
			max_attempts, idempotency_key, run_at, created_at, updated_at,
			attempt, lease_id, lease_expires_at, worker_id, started_at)`, cols, args)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// fetchQuery builds the FetchTasks statement for ntypes type filters. The
// candidate selection walks tasks_fetch (no filter) or tasks_fetch_type (one
// range per type, each bounded by the limit), so its cost is proportional
// to the batch, not to the number of pending tasks.
func fetchQuery(ntypes int) string {
	const order = ` ORDER BY effective_prio DESC, run_at, id LIMIT ?`
	var sel string
	switch ntypes {
	case 0:
		sel = `SELECT rowid FROM tasks WHERE state = 'pending'` + order
	case 1:
		sel = `SELECT rowid FROM tasks WHERE state = 'pending' AND type = ?` + order
	default:
		parts := make([]string, ntypes)
		for i := range parts {
			parts[i] = `SELECT * FROM (SELECT rowid AS r, effective_prio, run_at, id FROM tasks
				WHERE state = 'pending' AND type = ?` + order + `)`
		}
		sel = `SELECT r FROM (` + strings.Join(parts, ` UNION ALL `) + `)` + order
	}
	return `UPDATE tasks SET state = 'running', attempt = attempt + 1,
		lease_id = ? || printf('%x', rowid), lease_expires_at = ?, worker_id = ?, started_at = ?, updated_at = ?
		WHERE rowid IN (` + sel + `)
		RETURNING ` + taskCols
}

// FetchTasks implements store.Store.
func (s *Store) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	const op = "fetch tasks"
	if p.Limit <= 0 || p.LeaseDuration <= 0 || p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: Limit and LeaseDuration must be positive, Now set", op, store.ErrInvalid)
	}
	types := slices.Clone(p.Types)
	slices.Sort(types)
	types = slices.Compact(types)
	now := p.Now.UnixMicro()
	args := []any{newLeasePrefix(), p.Now.Add(p.LeaseDuration).UnixMicro(), p.WorkerID, now, now}
	switch len(types) {
	case 0:
		args = append(args, p.Limit)
	default:
		for _, t := range types {
			args = append(args, t, p.Limit)
		}
		if len(types) > 1 {
			args = append(args, p.Limit)
		}
	}
	var out []store.Task
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmtKey(ctx, tx, "fetch#"+strconv.Itoa(len(types)), func() string { return fetchQuery(len(types)) })
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		out, err = scanTasks(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.EffectivePrio != b.EffectivePrio {
			return a.EffectivePrio > b.EffectivePrio
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	})
	return out, nil
}

// outcomeRow is one outcome prepared for the database.
type outcomeRow struct {
	idx                            int // in the input
	id, lease, state               string
	runAt, prio                    any // NULL = keep
	release, hasErr, failure, reap int
	code, msg, class               any
	delay                          int64
	deadReason, kind, detail       string
}

const outcomeCols = 14

func (r *outcomeRow) args() []any {
	return []any{r.id, r.lease, r.state, r.runAt, r.prio, r.release, r.hasErr, r.code, r.msg, r.class,
		r.delay, r.deadReason, r.failure, r.reap}
}

// outcomeSet is the SET clause shared by both outcome statements; o names
// the outcome row and ?now the current time.
const outcomeSet = `
	state = o.state,
	run_at = coalesce(o.run_at, tasks.run_at),
	effective_prio = coalesce(o.prio, tasks.effective_prio),
	attempt = tasks.attempt - o.rel,
	last_error_code = CASE WHEN o.has_err THEN o.code ELSE tasks.last_error_code END,
	last_error_message = CASE WHEN o.has_err THEN o.msg ELSE tasks.last_error_message END,
	last_error_class = CASE WHEN o.has_err THEN o.class ELSE tasks.last_error_class END,
	last_delay = CASE WHEN o.rel THEN tasks.last_delay ELSE o.delay END,
	dead_reason = o.reason,
	first_failure_at = CASE WHEN o.fail AND tasks.first_failure_at IS NULL THEN $now ELSE tasks.first_failure_at END,
	lease_id = NULL, lease_expires_at = NULL, updated_at = $now`

// outcomeQuery builds the statement applying n outcomes at once: an UPDATE
// joined to a VALUES list, conditional on each task running under the
// named, unexpired (unless reaping) lease. The rows it returns are the
// outcomes that applied.
func outcomeQuery(n int) string {
	now := "?" + strconv.Itoa(n*outcomeCols+1)
	q := `WITH o(id, lease, state, run_at, prio, rel, has_err, code, msg, class, delay, reason, fail, reap) AS (VALUES ` +
		placeholders(n, outcomeCols) + `)
	UPDATE tasks SET` + outcomeSet + `
	FROM o
	WHERE tasks.id = o.id AND tasks.state = 'running' AND tasks.lease_id = o.lease
		AND (o.reap OR tasks.lease_expires_at >= $now)
	RETURNING tasks.id, tasks.type, tasks.attempt, tasks.worker_id, tasks.started_at`
	return strings.ReplaceAll(q, "$now", now)
}

const attemptInsertHead = `INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at,
	outcome, error_code, error_message, error_class, delay, detail)`

const attemptCols = 12

// RecordOutcomes implements store.Store. Outcomes are applied by set-based
// UPDATE ... FROM (VALUES ...) statements; a batch naming the same task
// twice is applied one outcome at a time, in order, so the second sees the
// effect of the first.
func (s *Store) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	const op = "record outcomes"
	if p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: zero Now", op, store.ErrInvalid)
	}
	if len(p.Outcomes) == 0 {
		return nil, s.check(op)
	}
	now := p.Now.UnixMicro()
	errs := make([]error, len(p.Outcomes))
	rows := make([]outcomeRow, 0, len(p.Outcomes))
	seen := make(map[string]bool, len(p.Outcomes))
	dups := false
	for i, o := range p.Outcomes {
		r := outcomeRow{idx: i, id: o.TaskID, lease: o.LeaseID, state: string(o.State), kind: o.OutcomeKind,
			reap: boolInt(o.ReapExpired), delay: int64(o.LastDelay), detail: o.Detail}
		switch o.State {
		case store.StateSucceeded:
			if r.kind == "" {
				r.kind = store.OutcomeSucceeded
			}
		case store.StateRetryWaiting:
			r.failure = 1
			ra := o.RunAt
			if ra.IsZero() {
				ra = p.Now
			}
			if !ra.After(p.Now) {
				r.state = string(store.StatePending)
			}
			r.runAt, r.prio = ra.UnixMicro(), o.EffectivePrio
		case store.StateDead:
			r.failure = 1
			r.deadReason = o.DeadReason
		case store.StatePending:
			r.release = 1
		default:
			errs[i] = fmt.Errorf("record outcome of task %s: %w: state %q is not an outcome", o.TaskID, store.ErrInvalid, o.State)
			continue
		}
		if r.kind == "" {
			r.kind = store.OutcomeFailed
		}
		if o.Error != nil && r.release == 0 {
			r.hasErr = 1
			r.code, r.msg, r.class = errorArgs(o.Error)
		}
		dups = dups || seen[o.TaskID]
		seen[o.TaskID] = true
		rows = append(rows, r)
	}
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		applied := make([]bool, len(p.Outcomes))
		type result struct {
			typ, worker string
			number      int
			started     sql.NullInt64
		}
		results := make([]result, len(p.Outcomes))
		apply := func(batch []outcomeRow) error {
			byID := make(map[string]int, len(batch))
			args := make([]any, 0, len(batch)*outcomeCols+1)
			for _, r := range batch {
				byID[r.id] = r.idx
				args = append(args, r.args()...)
			}
			args = append(args, now)
			st, err := s.txStmtKey(ctx, tx, "outcome#"+strconv.Itoa(len(batch)), func() string { return outcomeQuery(len(batch)) })
			if err != nil {
				return err
			}
			res, err := st.QueryContext(ctx, args...)
			if err != nil {
				return err
			}
			defer res.Close()
			for res.Next() {
				var id string
				var r result
				if err := res.Scan(&id, &r.typ, &r.number, &r.worker, &r.started); err != nil {
					return err
				}
				i := byID[id]
				applied[i], results[i] = true, r
			}
			return res.Err()
		}
		if dups {
			for _, r := range rows {
				if err := apply([]outcomeRow{r}); err != nil {
					return err
				}
			}
		} else {
			for _, n := range chunks(len(rows), outcomeCols) {
				if err := apply(rows[:n]); err != nil {
					return err
				}
				rows = rows[n:]
			}
		}
		var hist []any
		for i, o := range p.Outcomes {
			if errs[i] != nil {
				continue
			}
			if !applied[i] {
				errs[i] = fmt.Errorf("record outcome of task %s: %w", o.TaskID, store.ErrLeaseLost)
				continue
			}
			if o.State == store.StatePending {
				continue // a release is not an attempt
			}
			r := results[i]
			var started any
			if r.started.Valid {
				started = r.started.Int64
			}
			kind := o.OutcomeKind
			if kind == "" {
				kind = store.OutcomeFailed
				if o.State == store.StateSucceeded {
					kind = store.OutcomeSucceeded
				}
			}
			code, msg, class := errorArgs(o.Error)
			hist = append(hist, o.TaskID, r.typ, r.number, r.worker, started, now, kind, code, msg, class, int64(o.LastDelay), o.Detail)
		}
		return s.insertRows(ctx, tx, attemptInsertHead, attemptCols, hist)
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// ExtendLeases implements store.Store.
func (s *Store) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	const op = "extend leases"
	if p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: zero Now", op, store.ErrInvalid)
	}
	if len(p.Leases) == 0 {
		return nil, s.check(op)
	}
	now := p.Now.UnixMicro()
	errs := make([]error, len(p.Leases))
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		clear(errs)
		st, err := s.txStmt(ctx, tx, `UPDATE tasks SET lease_expires_at = ?
			WHERE id = ? AND state = 'running' AND lease_id = ? AND lease_expires_at >= ?`)
		if err != nil {
			return err
		}
		for i, l := range p.Leases {
			if l.ExpiresAt.IsZero() {
				errs[i] = fmt.Errorf("extend lease of task %s: %w: zero ExpiresAt", l.TaskID, store.ErrInvalid)
				continue
			}
			res, err := st.ExecContext(ctx, l.ExpiresAt.UnixMicro(), l.TaskID, l.LeaseID, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				errs[i] = fmt.Errorf("extend lease of task %s: %w", l.TaskID, store.ErrLeaseLost)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// ExpiredLeases implements store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, p store.ExpiredParams) ([]store.Task, error) {
	const op = "list expired leases"
	if p.Limit <= 0 || p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: Limit must be positive, Now set", op, store.ErrInvalid)
	}
	return s.queryTasks(ctx, op, `SELECT `+taskCols+` FROM tasks
		WHERE state = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at, id LIMIT ?`,
		p.Now.UnixMicro(), p.Limit)
}

// PromoteDue implements store.Store.
func (s *Store) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	const op = "promote due tasks"
	if p.Limit <= 0 || p.Now.IsZero() {
		return 0, fmt.Errorf("%s: %w: Limit must be positive, Now set", op, store.ErrInvalid)
	}
	var n int64
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, `UPDATE tasks SET state = 'pending', updated_at = ?1
			WHERE rowid IN (SELECT rowid FROM tasks
				WHERE state IN ('scheduled', 'retry_waiting') AND run_at <= ?1
				ORDER BY run_at, id LIMIT ?2)`)
		if err != nil {
			return err
		}
		res, err := st.ExecContext(ctx, p.Now.UnixMicro(), p.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// NextWakeup implements store.Store.
func (s *Store) NextWakeup(ctx context.Context) (store.Wakeup, error) {
	const op = "get next wakeup"
	if err := s.check(op); err != nil {
		return store.Wakeup{}, err
	}
	var run, lease sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT
		(SELECT min(run_at) FROM tasks WHERE state IN ('scheduled', 'retry_waiting')),
		(SELECT min(lease_expires_at) FROM tasks WHERE state = 'running')`).Scan(&run, &lease)
	if err != nil {
		return store.Wakeup{}, translate(op, err)
	}
	return store.Wakeup{NextRunAt: fromTS(run), NextLeaseExpiry: fromTS(lease)}, nil
}

// GetTask implements store.Store.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	op := "get task " + id
	if err := s.check(op); err != nil {
		return store.Task{}, err
	}
	t, err := scanTask(s.r.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = ?`, id))
	if err != nil {
		return store.Task{}, translate(op, err)
	}
	return t, nil
}

// ListAttempts implements store.Store.
func (s *Store) ListAttempts(ctx context.Context, taskID string) ([]store.Attempt, error) {
	op := "list attempts of task " + taskID
	if err := s.check(op); err != nil {
		return nil, err
	}
	// One read transaction, so the existence check sees the same snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, translate(op, err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay, detail
		FROM attempts WHERE task_id = ? ORDER BY id`, taskID)
	if err != nil {
		return nil, translate(op, err)
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
			return nil, translate(op, err)
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
		return nil, translate(op, err)
	}
	if len(out) == 0 {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, taskID).Scan(&one); err != nil {
			return nil, translate(op, err)
		}
	}
	return out, nil
}

// ListTasks implements store.Store. The cursor is the id of the last task
// of the previous page.
func (s *Store) ListTasks(ctx context.Context, p store.ListParams) ([]store.Task, string, error) {
	const op = "list tasks"
	if p.Limit <= 0 {
		return nil, "", fmt.Errorf("%s: %w: Limit must be positive", op, store.ErrInvalid)
	}
	var where []string
	var args []any
	if p.Type != "" {
		where = append(where, "type = ?")
		args = append(args, p.Type)
	}
	if len(p.States) > 0 {
		for _, st := range p.States {
			if !st.Valid() {
				return nil, "", fmt.Errorf("%s: %w: unknown state %q", op, store.ErrInvalid, st)
			}
			args = append(args, string(st))
		}
		where = append(where, "state IN ("+inList(len(p.States))+")")
	}
	if p.Cursor != "" {
		where = append(where, "id < ?")
		args = append(args, p.Cursor)
	}
	q := `SELECT ` + taskCols + ` FROM tasks`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, p.Limit+1)
	return s.page(ctx, op, q, args, p.Limit)
}

// page runs a query fetching limit+1 rows and returns the first limit and
// the cursor of the next page.
func (s *Store) page(ctx context.Context, op, q string, args []any, limit int) ([]store.Task, string, error) {
	ts, err := s.queryTasks(ctx, op, q, args...)
	if err != nil {
		return nil, "", err
	}
	if len(ts) > limit {
		ts = ts[:limit]
		return ts, ts[limit-1].ID, nil
	}
	return ts, "", nil
}

// queryTasks runs a read query returning task rows on the read pool.
func (s *Store) queryTasks(ctx context.Context, op, q string, args ...any) ([]store.Task, error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, translate(op, err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return nil, translate(op, err)
	}
	if ts == nil {
		ts = []store.Task{}
	}
	return ts, nil
}

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
	if p.ID == "" || p.Now.IsZero() {
		return store.Task{}, fmt.Errorf("cancel task: %w: empty id or zero Now", store.ErrInvalid)
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
	if p.ID == "" || p.Now.IsZero() {
		return store.Task{}, fmt.Errorf("retry task: %w: empty id or zero Now", store.ErrInvalid)
	}
	return s.transition(ctx, "retry task "+p.ID, "retry", p.ID, `UPDATE tasks SET `+retrySet+`
		WHERE id = ?2 AND state IN ('dead', 'cancelled')
		RETURNING `+taskCols, p.Now.UnixMicro(), p.ID)
}
