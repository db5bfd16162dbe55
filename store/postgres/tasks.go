package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// errorCols splits an ErrorInfo into nullable columns (nil = NULL code).
func errorCols(e *store.ErrorInfo) (code, msg, class *string) {
	if e == nil {
		return nil, nil, nil
	}
	return &e.Code, &e.Message, &e.Class
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

const insertTasksSQL = `
INSERT INTO tasks AS t (id, type, payload, priority, effective_prio, state, max_attempts,
	idempotency_key, run_at, created_at, updated_at, attempt, lease_id, lease_expires_at, worker_id, started_at)
SELECT i.id, i.type, i.payload, i.priority, i.priority, i.state, i.max_attempts,
	i.key, i.run_at, $10::timestamptz, $10::timestamptz, i.attempt, i.lease_id, i.lease_exp, i.worker_id,
	CASE WHEN i.lease_id IS NULL THEN NULL::timestamptz ELSE $10::timestamptz END
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int[], $5::text[], $6::int[],
	$7::text[], $8::timestamptz[], $9::int[], $11::int[], $12::text[], $13::timestamptz[], $14::text[])
	AS i(id, type, payload, priority, state, max_attempts, key, run_at, ord, attempt, lease_id, lease_exp, worker_id)
ORDER BY i.ord
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + taskCols

// InsertTasks inserts a batch in one multi-row statement (unnest of arrays)
// in one transaction. Idempotency keys are resolved with ON CONFLICT DO
// NOTHING on the unique partial index, then the existing tasks are read.
func (s *Store) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	const op = "insert tasks"
	if err := s.check(op); err != nil {
		return nil, err
	}
	if len(p.Tasks) == 0 {
		return []store.InsertResult{}, nil
	}
	now := us(p.Now)
	n := len(p.Tasks)
	var (
		ids, types, states = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		payloads           = make([][]byte, 0, n)
		prios, maxes, ords = make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
		keys               = make([]*string, 0, n)
		runAts             = make([]time.Time, 0, n)
		attempts           = make([]int32, 0, n)
		leaseIDs, workers  = make([]*string, 0, n), make([]string, 0, n)
		leaseExps          = make([]*time.Time, 0, n)
		firstByKey         = map[string]int{} // idempotency key -> first input index
		dupOf              = make([]int, n)   // input index -> earlier index with the same key, or -1
	)
	seenID := map[string]bool{}
	for i, nt := range p.Tasks {
		dupOf[i] = -1
		if nt.ID == "" || nt.Type == "" {
			return nil, fmt.Errorf("%s: task %d: id and type are required: %w", op, i, store.ErrInvalid)
		}
		if nt.IdempotencyKey != "" {
			if j, ok := firstByKey[nt.IdempotencyKey]; ok {
				dupOf[i] = j
				continue
			}
			firstByKey[nt.IdempotencyKey] = i
		}
		if seenID[nt.ID] {
			return nil, fmt.Errorf("%s: task id %q twice in one batch: %w", op, nt.ID, store.ErrInvalid)
		}
		seenID[nt.ID] = true
		runAt := nt.RunAt
		if runAt.IsZero() {
			runAt = p.Now
		}
		state := store.StatePending
		if runAt.After(p.Now) {
			state = store.StateScheduled
		}
		if nt.Lease != nil && state == store.StatePending {
			state = store.StateRunning
			attempts = append(attempts, 1)
			leaseIDs = append(leaseIDs, &nt.Lease.LeaseID)
			workers = append(workers, nt.Lease.WorkerID)
			leaseExps = append(leaseExps, nullTime(p.Now.Add(nt.Lease.Duration)))
		} else {
			attempts = append(attempts, 0)
			leaseIDs = append(leaseIDs, nil)
			workers = append(workers, "")
			leaseExps = append(leaseExps, nil)
		}
		ids = append(ids, nt.ID)
		types = append(types, nt.Type)
		payloads = append(payloads, []byte(nt.Payload))
		prios = append(prios, int32(nt.Priority))
		states = append(states, string(state))
		maxes = append(maxes, int32(nt.MaxAttempts))
		keys = append(keys, nullString(nt.IdempotencyKey))
		runAts = append(runAts, us(runAt))
		ords = append(ords, int32(i))
	}

	results := make([]store.InsertResult, n)
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, insertTasksSQL, ids, types, payloads, prios, states, maxes,
			keys, runAts, ords, now, attempts, leaseIDs, leaseExps, workers)
		if err != nil {
			return err
		}
		inserted, err := collectTasks(rows)
		if err != nil {
			return err
		}
		byID := make(map[string]store.Task, len(inserted))
		for _, t := range inserted {
			byID[t.ID] = t
		}
		// Keyed tasks that were not inserted already exist.
		var missingKeys []string
		for i, nt := range p.Tasks {
			if dupOf[i] >= 0 {
				continue
			}
			if t, ok := byID[nt.ID]; ok && t.IdempotencyKey == nt.IdempotencyKey {
				results[i] = store.InsertResult{Task: t}
				continue
			}
			missingKeys = append(missingKeys, nt.IdempotencyKey)
		}
		if len(missingKeys) > 0 {
			rows, err := tx.Query(ctx, "SELECT "+taskCols+" FROM tasks t WHERE t.idempotency_key = ANY($1)", missingKeys)
			if err != nil {
				return err
			}
			existing, err := collectTasks(rows)
			if err != nil {
				return err
			}
			byKey := make(map[string]store.Task, len(existing))
			for _, t := range existing {
				byKey[t.IdempotencyKey] = t
			}
			for i, nt := range p.Tasks {
				if dupOf[i] >= 0 || results[i].Task.ID != "" {
					continue
				}
				t, ok := byKey[nt.IdempotencyKey]
				if !ok {
					// Deleted between the conflict and the read: let the
					// caller retry the whole batch.
					return fmt.Errorf("task with idempotency key %q vanished: %w", nt.IdempotencyKey, store.ErrUnavailable)
				}
				results[i] = store.InsertResult{Task: t, Duplicate: true}
			}
		}
		for i := range p.Tasks {
			if j := dupOf[i]; j >= 0 {
				results[i] = store.InsertResult{Task: results[j].Task, Duplicate: true}
			}
		}
		// Wake other nodes for tasks they could fetch now, and the leader's
		// scheduler for scheduled ones; tasks leased at insert are already
		// running and need nobody.
		for _, t := range inserted {
			if t.State == store.StatePending || t.State == store.StateScheduled {
				return s.notify(ctx, tx)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

const fetchPlanSettings = "SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off"

const fetchSQL = `
WITH due AS MATERIALIZED (
	SELECT id FROM tasks
	WHERE state = 'pending' AND ($2::text[] IS NULL OR type = ANY($2))
	ORDER BY effective_prio DESC, run_at, id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE tasks AS t SET
	state = 'running',
	attempt = t.attempt + 1,
	lease_id = gen_random_uuid()::text,
	lease_expires_at = $3,
	worker_id = $4,
	started_at = $5,
	updated_at = $5
FROM due
WHERE t.id = due.id
RETURNING ` + taskCols

// FetchTasks leases up to Limit pending tasks with one UPDATE over a
// FOR UPDATE SKIP LOCKED subquery: concurrent fetchers skip each other's
// rows instead of waiting, and never lease the same task.
func (s *Store) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	const op = "fetch tasks"
	if err := s.check(op); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	if p.LeaseDuration <= 0 {
		return nil, fmt.Errorf("%s: lease duration must be positive (got %s): %w", op, p.LeaseDuration, store.ErrInvalid)
	}
	var types []string
	if len(p.Types) > 0 {
		types = p.Types
	}
	now := us(p.Now)
	var tasks []store.Task
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		// Queue tables have volatile statistics: with a backlog that built
		// up after the last ANALYZE the planner would bitmap-scan and sort
		// every pending row on each fetch. Walking the pending index in
		// order and stopping after Limit lockable rows is always right.
		if _, err := tx.Exec(ctx, fetchPlanSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, fetchSQL, p.Limit, types, us(p.Now.Add(p.LeaseDuration)), p.WorkerID, now)
		if err != nil {
			return err
		}
		tasks, err = collectTasks(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(tasks, func(i, j int) bool {
		a, b := tasks[i], tasks[j]
		if a.EffectivePrio != b.EffectivePrio {
			return a.EffectivePrio > b.EffectivePrio
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	})
	if tasks == nil {
		tasks = []store.Task{}
	}
	return tasks, nil
}

// recordOutcomeSQL applies one outcome: it locks the task if it is running
// under the lease (and, unless reaping, the lease is still valid at Now),
// updates it and writes the history row from the task's pre-update values.
// The result is 1 when applied and 0 when the lease was lost.
const recordOutcomeSQL = `
WITH cur AS MATERIALIZED (
	SELECT id, type, attempt, worker_id, started_at FROM tasks
	WHERE id = $1 AND state = 'running' AND lease_id = $2 AND ($3 OR lease_expires_at >= $4)
	FOR UPDATE
), upd AS (
	UPDATE tasks AS t SET
		state = $5,
		attempt = CASE WHEN $5 = 'pending' AND NOT $16 THEN t.attempt - 1 ELSE t.attempt END,
		run_at = CASE WHEN $16 THEN $6 ELSE t.run_at END,
		effective_prio = CASE WHEN $16 THEN $7 ELSE t.effective_prio END,
		last_error_code = CASE WHEN $8::text IS NULL THEN t.last_error_code ELSE $8 END,
		last_error_message = CASE WHEN $8::text IS NULL THEN t.last_error_message ELSE $9 END,
		last_error_class = CASE WHEN $8::text IS NULL THEN t.last_error_class ELSE $10 END,
		first_failure_at = CASE WHEN $17 THEN coalesce(t.first_failure_at, $4) ELSE t.first_failure_at END,
		last_delay_ns = CASE WHEN $5 = 'pending' AND NOT $16 THEN t.last_delay_ns ELSE $11 END,
		dead_reason = CASE WHEN $5 = 'dead' THEN $12 ELSE t.dead_reason END,
		lease_id = NULL,
		lease_expires_at = NULL,
		updated_at = $4
	FROM cur WHERE t.id = cur.id
	RETURNING t.id
), hist AS (
	INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay_ns, detail)
	SELECT cur.id, cur.type, cur.attempt, cur.worker_id, cur.started_at, $4,
		$13, $8, $9, $10, $11, $14
	FROM cur WHERE $15
)
SELECT count(*) FROM upd`

// recordOutcomesSQL is recordOutcomeSQL for a whole batch of outcomes with
// distinct task ids, as arrays. It returns the ids of the applied outcomes.
// Rows are locked in id order so concurrent batches cannot deadlock.
//
// The outcome array is joined once, in cur, which carries every outcome
// column along: pgx prepares the statement, and after five executions
// PostgreSQL may switch to a generic plan that estimates the unnest at 10
// rows. Joining the unnest a second time (in upd) then became a nested loop
// over it, quadratic in the batch: 1,000 outcomes took ~400 ms instead of
// ~40 ms.
const recordOutcomesSQL = `
WITH o AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::text[], $5::timestamptz[],
		$6::int[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[],
		$13::text[], $14::bool[], $15::bool[], $16::bool[]) WITH ORDINALITY
		AS o(id, lease, reap, state, run_at, prio, code, msg, class, delay, reason, kind,
		detail, hist, retry, failure, ord)
), cur AS MATERIALIZED (
	SELECT t.id, t.type, t.attempt, t.worker_id, t.started_at,
		o.state AS new_state, o.run_at AS new_run_at, o.prio, o.code, o.msg, o.class, o.delay,
		o.reason, o.kind, o.detail, o.hist, o.retry, o.failure, o.ord
	FROM tasks t JOIN o ON o.id = t.id
	WHERE t.state = 'running' AND t.lease_id = o.lease AND (o.reap OR t.lease_expires_at >= $17)
	ORDER BY t.id
	FOR UPDATE OF t
), upd AS (
	UPDATE tasks AS t SET
		state = cur.new_state,
		attempt = CASE WHEN cur.new_state = 'pending' AND NOT cur.retry THEN t.attempt - 1 ELSE t.attempt END,
		run_at = CASE WHEN cur.retry THEN cur.new_run_at ELSE t.run_at END,
		effective_prio = CASE WHEN cur.retry THEN cur.prio ELSE t.effective_prio END,
		last_error_code = CASE WHEN cur.code IS NULL THEN t.last_error_code ELSE cur.code END,
		last_error_message = CASE WHEN cur.code IS NULL THEN t.last_error_message ELSE cur.msg END,
		last_error_class = CASE WHEN cur.code IS NULL THEN t.last_error_class ELSE cur.class END,
		first_failure_at = CASE WHEN cur.failure THEN coalesce(t.first_failure_at, $17) ELSE t.first_failure_at END,
		last_delay_ns = CASE WHEN cur.new_state = 'pending' AND NOT cur.retry THEN t.last_delay_ns ELSE cur.delay END,
		dead_reason = CASE WHEN cur.new_state = 'dead' THEN cur.reason ELSE t.dead_reason END,
		lease_id = NULL,
		lease_expires_at = NULL,
		updated_at = $17
	FROM cur
	WHERE t.id = cur.id
	RETURNING t.id
), hist AS (
	INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay_ns, detail)
	SELECT cur.id, cur.type, cur.attempt, cur.worker_id, cur.started_at, $17,
		cur.kind, cur.code, cur.msg, cur.class, cur.delay, cur.detail
	FROM cur
	WHERE cur.hist
	ORDER BY cur.ord
)
SELECT id FROM upd`

// RecordOutcomes applies the outcomes in one transaction (one commit for the
// batch). Outcomes for distinct tasks go to the server as a single
// statement over arrays; a batch naming a task twice is applied statement
// by statement (a pgx.Batch, still one round trip) so that the outcomes
// apply in order, as if recorded one after the other.
func (s *Store) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	const op = "record outcomes"
	if err := s.check(op); err != nil {
		return nil, err
	}
	now := us(p.Now)
	n := len(p.Outcomes)
	type row struct {
		invalid              error
		state                string
		retry, failure, hist bool
		kind                 string
		code, msg, class     *string
	}
	rowsIn := make([]row, n)
	released := false
	distinct := true
	seen := make(map[string]bool, n)
	for i, o := range p.Outcomes {
		if seen[o.TaskID] {
			distinct = false
		}
		seen[o.TaskID] = true
		state := o.State
		retry := false // a failure stored as retry_waiting or pending
		switch state {
		case store.StateSucceeded, store.StateDead:
		case store.StateRetryWaiting:
			retry = true
			if !o.RunAt.After(p.Now) {
				state = store.StatePending
			}
		case store.StatePending:
		default:
			r := row{invalid: fmt.Errorf("record outcome of task %s: state %q is not an outcome: %w", o.TaskID, o.State, store.ErrInvalid)}
			rowsIn[i] = r
			continue
		}
		if state == store.StatePending {
			released = true
		}
		kind := o.OutcomeKind
		if kind == "" {
			kind = store.OutcomeFailed
			if o.State == store.StateSucceeded {
				kind = store.OutcomeSucceeded
			}
		}
		r := row{state: string(state), retry: retry, kind: kind,
			failure: o.State == store.StateRetryWaiting || o.State == store.StateDead,
			hist:    o.State != store.StatePending}
		r.code, r.msg, r.class = errorCols(o.Error)
		rowsIn[i] = r
	}
	errs := make([]error, n)
	if n == 0 {
		return errs, nil
	}
	applied := make([]bool, n)
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		if distinct {
			var (
				ids, leases, states, kinds, details, reasons = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
				codes, msgs, classes                         = make([]*string, n), make([]*string, n), make([]*string, n)
				reaps, hists, retries, failures              = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
				runAts                                       = make([]time.Time, n)
				prios                                        = make([]int32, n)
				delays                                       = make([]int64, n)
			)
			for i, o := range p.Outcomes {
				r := rowsIn[i]
				if r.invalid != nil {
					continue // the empty id matches no task
				}
				ids[i], leases[i], states[i], kinds[i], details[i], reasons[i] = o.TaskID, o.LeaseID, r.state, r.kind, o.Detail, o.DeadReason
				codes[i], msgs[i], classes[i] = r.code, r.msg, r.class
				reaps[i], hists[i], retries[i], failures[i] = o.ReapExpired, r.hist, r.retry, r.failure
				runAts[i], prios[i], delays[i] = us(o.RunAt), int32(o.EffectivePrio), int64(o.LastDelay)
			}
			rows, err := tx.Query(ctx, recordOutcomesSQL, ids, leases, reaps, states, runAts, prios,
				codes, msgs, classes, delays, reasons, kinds, details, hists, retries, failures, now)
			if err != nil {
				return err
			}
			index := make(map[string]int, n)
			for i, o := range p.Outcomes {
				index[o.TaskID] = i
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				applied[index[id]] = true
			}
			if err := rows.Err(); err != nil {
				return err
			}
		} else {
			batch := &pgx.Batch{}
			for i, o := range p.Outcomes {
				r := rowsIn[i]
				if r.invalid != nil {
					o.TaskID = "" // matches no task
				}
				batch.Queue(recordOutcomeSQL, o.TaskID, o.LeaseID, o.ReapExpired, now,
					r.state, us(o.RunAt), o.EffectivePrio, r.code, r.msg, r.class,
					int64(o.LastDelay), o.DeadReason, r.kind, o.Detail, r.hist, r.retry, r.failure)
			}
			br := tx.SendBatch(ctx, batch)
			for i := range p.Outcomes {
				var k int
				if err := br.QueryRow().Scan(&k); err != nil {
					br.Close()
					return err
				}
				applied[i] = k > 0
			}
			if err := br.Close(); err != nil {
				return err
			}
		}
		if released {
			return s.notify(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, o := range p.Outcomes {
		if r := rowsIn[i]; r.invalid != nil {
			errs[i] = r.invalid
		} else if !applied[i] {
			errs[i] = fmt.Errorf("record outcome of task %s lease %s: %w", o.TaskID, o.LeaseID, store.ErrLeaseLost)
		}
	}
	return errs, nil
}

// ExtendLeases moves lease expiries with one conditional UPDATE.
func (s *Store) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	const op = "extend leases"
	if err := s.check(op); err != nil {
		return nil, err
	}
	errs := make([]error, len(p.Leases))
	if len(p.Leases) == 0 {
		return errs, nil
	}
	ids := make([]string, len(p.Leases))
	leases := make([]string, len(p.Leases))
	exps := make([]time.Time, len(p.Leases))
	for i, l := range p.Leases {
		ids[i], leases[i], exps[i] = l.TaskID, l.LeaseID, us(l.ExpiresAt)
	}
	// The rows are locked in id order, like RecordOutcomes does: a
	// heartbeat and an outcome batch of the same node touch the same rows,
	// and locking them in the join's (arbitrary) order deadlocked against
	// the id-ordered outcome batch, aborting it.
	rows, err := s.pool.Query(ctx, `
WITH cur AS MATERIALIZED (
	SELECT t.id, x.exp FROM tasks t
	JOIN unnest($1::text[], $2::text[], $3::timestamptz[]) AS x(id, lease, exp) ON x.id = t.id
	WHERE t.state = 'running' AND t.lease_id = x.lease AND t.lease_expires_at >= $4
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE tasks AS t SET lease_expires_at = cur.exp
FROM cur
WHERE t.id = cur.id
RETURNING t.id, t.lease_id`, ids, leases, exps, us(p.Now))
	if err != nil {
		return nil, translate(op, err)
	}
	type ref struct{ id, lease string }
	ok := map[ref]bool{}
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.id, &r.lease); err != nil {
			rows.Close()
			return nil, translate(op, err)
		}
		ok[r] = true
	}
	if err := rows.Err(); err != nil {
		return nil, translate(op, err)
	}
	for i, l := range p.Leases {
		if !ok[ref{l.TaskID, l.LeaseID}] {
			errs[i] = fmt.Errorf("extend lease of task %s lease %s: %w", l.TaskID, l.LeaseID, store.ErrLeaseLost)
		}
	}
	return errs, nil
}

// ExpiredLeases lists running tasks whose lease expired before Now (a lease
// is current up to and including its expiry instant).
func (s *Store) ExpiredLeases(ctx context.Context, p store.ExpiredParams) ([]store.Task, error) {
	const op = "list expired leases"
	if err := s.check(op); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM tasks t
WHERE t.state = 'running' AND t.lease_expires_at < $1
ORDER BY t.lease_expires_at, t.id LIMIT $2`, us(p.Now), p.Limit)
	if err != nil {
		return nil, translate(op, err)
	}
	tasks, err := collectTasks(rows)
	if err != nil {
		return nil, translate(op, err)
	}
	if tasks == nil {
		tasks = []store.Task{}
	}
	return tasks, nil
}

// PromoteDue moves due scheduled/retry_waiting tasks to pending.
func (s *Store) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	const op = "promote due tasks"
	if p.Limit <= 0 {
		return 0, fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	var n int64
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
WITH due AS MATERIALIZED (
	SELECT id FROM tasks
	WHERE state IN ('scheduled', 'retry_waiting') AND run_at <= $1
	ORDER BY run_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE tasks AS t SET state = 'pending', updated_at = $1
FROM due
WHERE t.id = due.id`, us(p.Now), p.Limit)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n > 0 {
			return s.notify(ctx, tx)
		}
		return nil
	})
	return int(n), err
}

// NextWakeup returns the earliest due time and lease expiry.
func (s *Store) NextWakeup(ctx context.Context) (store.Wakeup, error) {
	const op = "get next wakeup"
	if err := s.check(op); err != nil {
		return store.Wakeup{}, err
	}
	var runAt, exp *time.Time
	err := s.pool.QueryRow(ctx, `SELECT
	(SELECT min(run_at) FROM tasks WHERE state IN ('scheduled', 'retry_waiting')),
	(SELECT min(lease_expires_at) FROM tasks WHERE state = 'running')`).Scan(&runAt, &exp)
	if err != nil {
		return store.Wakeup{}, translate(op, err)
	}
	return store.Wakeup{NextRunAt: fromNull(runAt), NextLeaseExpiry: fromNull(exp)}, nil
}

// GetTask returns one task.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	op := "get task " + id
	if err := s.check(op); err != nil {
		return store.Task{}, err
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
	var out []store.Attempt
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1)", taskID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return store.ErrNotFound
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
		return rows.Err()
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
	var states []string
	for _, st := range p.States {
		if !st.Valid() {
			return nil, "", fmt.Errorf("%s: unknown state %q: %w", op, st, store.ErrInvalid)
		}
		states = append(states, string(st))
	}
	rows, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM tasks t
WHERE ($1 = '' OR t.type = $1)
	AND ($2::text[] IS NULL OR t.state = ANY($2))
	AND ($3 = '' OR t.id < $3)
ORDER BY t.id DESC LIMIT $4`, p.Type, states, p.Cursor, p.Limit+1)
	if err != nil {
		return nil, "", translate(op, err)
	}
	return page(op, rows, p.Limit)
}

// page collects up to limit tasks from a query that asked for limit+1 and
// returns the next cursor.
func page(op string, rows pgx.Rows, limit int) ([]store.Task, string, error) {
	tasks, err := collectTasks(rows)
	if err != nil {
		return nil, "", translate(op, err)
	}
	next := ""
	if len(tasks) > limit {
		tasks = tasks[:limit]
		next = tasks[limit-1].ID
	}
	if tasks == nil {
		tasks = []store.Task{}
	}
	return tasks, next, nil
}

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
