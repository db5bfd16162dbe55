package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// errorCols splits an ErrorInfo into nullable columns (nil = NULL code).
func errorCols(e *store.ErrorInfo) (code, msg, class *string) {
	if e == nil {
		return nil, nil, nil
	}
	return &e.Code, &e.Message, &e.Class
}

// The outcome statements are conditional updates: a row changes only while
// the task is running under the named lease, unexpired (expired for the
// lease reaper's outcome, ReapExpired). A concurrent change to the row makes
// PostgreSQL re-check the condition on the newest version before updating
// (READ COMMITTED), so no separate row
// lock is taken. RETURNING yields the columns the attempt history needs;
// type, attempt, worker and start are the same before and after the update
// of any outcome that writes history.

// recordOutcomeSQL applies one outcome; it returns 1 if it applied, else 0.
const recordOutcomeSQL = `
WITH upd AS (
	UPDATE tasks AS t SET
		state = $5,
		attempt = CASE WHEN $5 <> 'succeeded' AND NOT $17 THEN t.attempt - 1 ELSE t.attempt END,
		run_at = CASE WHEN $16 THEN $6 ELSE t.run_at END,
		effective_prio = CASE WHEN $16 AND $17 THEN $7 ELSE t.effective_prio END,
		last_error_code = CASE WHEN $8::text IS NULL THEN t.last_error_code ELSE $8 END,
		last_error_message = CASE WHEN $8::text IS NULL THEN t.last_error_message ELSE $9 END,
		last_error_class = CASE WHEN $8::text IS NULL THEN t.last_error_class ELSE $10 END,
		first_failure_at = CASE WHEN $17 THEN coalesce(t.first_failure_at, $4) ELSE t.first_failure_at END,
		last_delay_ns = CASE WHEN $5 <> 'succeeded' AND NOT $17 THEN t.last_delay_ns ELSE $11 END,
		dead_reason = CASE WHEN $5 = 'dead' THEN $12 ELSE t.dead_reason END,
		success_detail = CASE WHEN $5 = 'succeeded' THEN $14 ELSE t.success_detail END,
		lease_id = NULL,
		lease_expires_at = NULL,
		updated_at = $4
	WHERE t.id = $1 AND t.state = 'running' AND t.lease_id = $2 AND (CASE WHEN $3 THEN t.lease_expires_at < $4 ELSE t.lease_expires_at >= $4 END)
	RETURNING t.id, t.type, t.attempt, t.worker_id, t.started_at
), hist AS (
	INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay_ns, detail)
	SELECT upd.id, upd.type, upd.attempt, upd.worker_id, upd.started_at, $4,
		$13, $8, $9, $10, $11, $14
	FROM upd WHERE $15
)
SELECT count(*) FROM upd`

// outcomePlanSettings: see recordOutcomesSQL.
const outcomePlanSettings = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)`

// recordOutcomesSQL applies outcomes for distinct tasks, given as arrays
// (sorted by task id, so concurrent batches change rows in the same order);
// it returns the ids of the tasks whose outcome applied.
//
// The state test is written (t.state || ”) = 'running' so that it does not
// match the predicate of the running-lease index: the planner, which
// believes few tasks are running, would otherwise join the outcomes with a
// full scan of that index, and the index keeps an entry for every task
// that ran since the last vacuum, so under load each batch walked tens of
// thousands of dead entries (a batch of 800 outcomes took 56 ms instead of
// 10). Each task is found through the primary key instead.
const recordOutcomesSQL = `
WITH o AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::text[], $5::timestamptz[],
		$6::int[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[],
		$13::text[], $14::bool[], $15::bool[], $16::bool[]) WITH ORDINALITY
		AS o(id, lease, reap, state, run_at, prio, code, msg, class, delay, reason, kind,
		detail, hist, retry, failure, ord)
), upd AS (
	UPDATE tasks AS t SET
		state = o.state,
		attempt = CASE WHEN o.state <> 'succeeded' AND NOT o.failure THEN t.attempt - 1 ELSE t.attempt END,
		run_at = CASE WHEN o.retry THEN o.run_at ELSE t.run_at END,
		effective_prio = CASE WHEN o.retry AND o.failure THEN o.prio ELSE t.effective_prio END,
		last_error_code = CASE WHEN o.code IS NULL THEN t.last_error_code ELSE o.code END,
		last_error_message = CASE WHEN o.code IS NULL THEN t.last_error_message ELSE o.msg END,
		last_error_class = CASE WHEN o.code IS NULL THEN t.last_error_class ELSE o.class END,
		first_failure_at = CASE WHEN o.failure THEN coalesce(t.first_failure_at, $17) ELSE t.first_failure_at END,
		last_delay_ns = CASE WHEN o.state <> 'succeeded' AND NOT o.failure THEN t.last_delay_ns ELSE o.delay END,
		dead_reason = CASE WHEN o.state = 'dead' THEN o.reason ELSE t.dead_reason END,
		success_detail = CASE WHEN o.state = 'succeeded' THEN o.detail ELSE t.success_detail END,
		lease_id = NULL,
		lease_expires_at = NULL,
		updated_at = $17
	FROM o
	WHERE t.id = o.id AND (t.state || '') = 'running' AND t.lease_id = o.lease AND (CASE WHEN o.reap THEN t.lease_expires_at < $17 ELSE t.lease_expires_at >= $17 END)
	RETURNING t.id, t.type, t.attempt, t.worker_id, t.started_at,
		o.code, o.msg, o.class, o.delay, o.kind, o.detail, o.hist, o.ord
), hist AS (
	INSERT INTO attempts (task_id, task_type, number, worker_id, started_at, finished_at,
		outcome, error_code, error_message, error_class, delay_ns, detail)
	SELECT upd.id, upd.type, upd.attempt, upd.worker_id, upd.started_at, $17,
		upd.kind, upd.code, upd.msg, upd.class, upd.delay, upd.detail
	FROM upd
	WHERE upd.hist
	ORDER BY upd.ord
)
SELECT id FROM upd`

// recordSuccessesSQL is recordOutcomesSQL for a batch of plain successes
// (distinct tasks, no error): what recordOutcomesSQL does for such rows,
// over 5 arrays instead of 16 and without the history insert, which a
// success never writes. It is the common batch of a healthy queue.
const recordSuccessesSQL = `
UPDATE tasks AS t SET
	state = 'succeeded',
	last_delay_ns = o.delay,
	success_detail = o.detail,
	lease_id = NULL,
	lease_expires_at = NULL,
	updated_at = $6
FROM unnest($1::text[], $2::text[], $3::bool[], $4::bigint[], $5::text[]) AS o(id, lease, reap, delay, detail)
WHERE t.id = o.id AND (t.state || '') = 'running' AND t.lease_id = o.lease AND (CASE WHEN o.reap THEN t.lease_expires_at < $6 ELSE t.lease_expires_at >= $6 END)
RETURNING t.id`

// RecordOutcomes applies the outcomes in one transaction, committed with
// the other writes of its group (group.go). Outcomes for distinct tasks go
// to the server as a single statement over arrays; a batch naming a task
// twice is applied statement by statement so that the outcomes apply in
// order, as if recorded one after the other.
func (s *Store) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	const op = "record outcomes"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	p.Outcomes = store.CleanOutcomes(p.Outcomes) // one odd message must not fail the batch
	now := us(p.Now)
	n := len(p.Outcomes)
	type row struct {
		invalid              error
		state                string
		runAt                time.Time
		retry, failure, hist bool
		prio                 int32 // stored only for a failure's retry (checked by Fits32)
		kind                 string
		code, msg, class     *string
	}
	rowsIn := make([]row, n)
	released := false // a task stored pending: wake the fetchers
	delayed := false  // a retry stored retry_waiting: wake the scheduler
	distinct := true
	plain := true // every outcome a valid success without error (recordSuccessesSQL)
	seen := make(map[string]bool, n)
	for i, o := range p.Outcomes {
		if seen[o.TaskID] {
			distinct = false
		}
		seen[o.TaskID] = true
		state := o.State
		retry := false // stored with its RunAt: a failure stored as retry_waiting or pending, or a delayed release
		runAt := o.RunAt
		var invalid error
		switch state {
		case store.StateSucceeded, store.StateDead:
		case store.StateRetryWaiting:
			retry = true
			if runAt.IsZero() {
				runAt = p.Now
			}
			if !runAt.After(p.Now) {
				state = store.StatePending
			}
			if !store.Fits32(o.EffectivePrio) {
				invalid = fmt.Errorf("record outcome of task %s: effective priority %d does not fit in 32 bits: %w", o.TaskID, o.EffectivePrio, store.ErrInvalid)
			} else if err := store.CheckTime("run time", runAt); err != nil {
				invalid = fmt.Errorf("record outcome of task %s: %w", o.TaskID, err)
			}
		case store.StatePending:
			if runAt.After(p.Now) {
				// A delayed release: due again at RunAt, the attempt not
				// counted (store.Outcome). It is no failure.
				state, retry = store.StateRetryWaiting, true
				if err := store.CheckTime("run time", runAt); err != nil {
					invalid = fmt.Errorf("record outcome of task %s: %w", o.TaskID, err)
				}
			}
		default:
			invalid = fmt.Errorf("record outcome of task %s: state %q is not an outcome: %w", o.TaskID, o.State, store.ErrInvalid)
		}
		if invalid == nil && (!store.ValidText(o.TaskID) || !store.ValidText(o.LeaseID)) {
			// No stored task or lease has such an id (the server would
			// refuse it as text and fail the whole batch).
			invalid = fmt.Errorf("record outcome of task %q lease %q: %w", o.TaskID, o.LeaseID, store.ErrLeaseLost)
		}
		if invalid != nil {
			rowsIn[i] = row{invalid: invalid}
			plain = false
			continue
		}
		if o.State != store.StateSucceeded || o.Error != nil {
			plain = false
		}
		if state == store.StatePending {
			released = true
		} else if retry {
			delayed = true
		}
		if !retry {
			// Not stored (run_at is kept): whatever it holds, a time the
			// server cannot take must not fail the batch.
			runAt = time.Time{}
		}
		failure := o.State == store.StateRetryWaiting || o.State == store.StateDead
		kind := o.OutcomeKind
		if kind == "" {
			kind = store.OutcomeFailed
			if o.State == store.StateSucceeded {
				kind = store.OutcomeSucceeded
			}
		}
		r := row{state: string(state), retry: retry, kind: kind, runAt: runAt, failure: failure,
			// A release is not an attempt; a success is recorded in the
			// task row itself (see ListAttempts).
			hist: o.State != store.StatePending && o.State != store.StateSucceeded}
		if retry && failure {
			r.prio = int32(o.EffectivePrio)
		}
		if o.State != store.StatePending { // a release keeps the last error
			r.code, r.msg, r.class = errorCols(o.Error)
		}
		rowsIn[i] = r
	}
	errs := make([]error, n)
	if n == 0 {
		return errs, nil
	}
	applied := make([]bool, n)
	var (
		queued []func(b *pgx.Batch)
		read   func(pgx.BatchResults) error
		locks  []string // the task rows the write updates (an invalid entry's "" matches none)
	)
	if distinct {
		var (
			ids, leases, states, kinds, details, reasons = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			codes, msgs, classes                         = make([]*string, n), make([]*string, n), make([]*string, n)
			reaps, hists, retries, failures              = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
			runAts                                       = make([]time.Time, n)
			prios                                        = make([]int32, n)
			delays                                       = make([]int64, n)
		)
		// Rows in task id order: concurrent batches then change rows in
		// the same order and cannot deadlock each other.
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(p.Outcomes[a].TaskID, p.Outcomes[b].TaskID) })
		for k, i := range order {
			o, r := p.Outcomes[i], rowsIn[i]
			if r.invalid != nil {
				continue // the empty id matches no task
			}
			ids[k], leases[k], states[k], kinds[k], details[k], reasons[k] = o.TaskID, o.LeaseID, r.state, r.kind, o.Detail, o.DeadReason
			codes[k], msgs[k], classes[k] = r.code, r.msg, r.class
			reaps[k], hists[k], retries[k], failures[k] = o.ReapExpired, r.hist, r.retry, r.failure
			runAts[k], prios[k], delays[k] = us(r.runAt), r.prio, int64(o.LastDelay)
		}
		locks = ids
		queued = append(queued, func(b *pgx.Batch) {
			b.Queue(outcomePlanSettings)
			if plain {
				b.Queue(recordSuccessesSQL, ids, leases, reaps, delays, details, now)
			} else {
				b.Queue(recordOutcomesSQL, ids, leases, reaps, states, runAts, prios,
					codes, msgs, classes, delays, reasons, kinds, details, hists, retries, failures, now)
			}
		})
		index := make(map[string]int, n)
		for i, o := range p.Outcomes {
			index[o.TaskID] = i
		}
		read = func(br pgx.BatchResults) error {
			// The writer may run the write again alone after its group
			// rolled back: only this run's rows count.
			clear(applied)
			if _, err := br.Exec(); err != nil { // outcomePlanSettings
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				applied[index[id]] = true
			}
			return rows.Err()
		}
	} else {
		// The same task twice: one statement per outcome, in order, so
		// each sees the effect of the one before.
		for i, o := range p.Outcomes {
			r := rowsIn[i]
			if r.invalid != nil {
				o = store.Outcome{} // matches no task, and every parameter encodes
			}
			locks = append(locks, o.TaskID)
			queued = append(queued, func(b *pgx.Batch) {
				b.Queue(recordOutcomeSQL, o.TaskID, o.LeaseID, o.ReapExpired, now,
					r.state, us(r.runAt), r.prio, r.code, r.msg, r.class,
					int64(o.LastDelay), o.DeadReason, r.kind, o.Detail, r.hist, r.retry, r.failure)
			})
		}
		read = func(br pgx.BatchResults) error {
			for i := range p.Outcomes {
				var k int
				if err := br.QueryRow().Scan(&k); err != nil {
					return err
				}
				applied[i] = k > 0
			}
			return nil
		}
	}
	// Notify for the released tasks (fetchers) and for a new retry time
	// (the scheduler, which may run on another node: it sleeps until the
	// earliest due time it knows of, and would otherwise learn of this one
	// only at its next poll, however soon the retry is due).
	err := s.groupWrite(ctx, op, &groupWrite{
		queue: func(b *pgx.Batch) {
			for _, q := range queued {
				q(b)
			}
		},
		read:    read,
		notify:  released || delayed,
		outcome: true,
		locks:   locks,
		sorted:  distinct, // one statement over rows sorted by id
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
