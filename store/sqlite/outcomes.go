package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/retryq/retryq/store"
)

func errorArgs(e *store.ErrorInfo) (code, msg, class any) {
	if e == nil {
		return nil, nil, nil
	}
	return e.Code, e.Message, e.Class
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

const outcomeCols = 15

func (r *outcomeRow) args() []any {
	return []any{r.id, r.lease, r.state, r.runAt, r.prio, r.release, r.hasErr, r.code, r.msg, r.class,
		r.delay, r.deadReason, r.failure, r.reap, r.detail}
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
	success_detail = CASE WHEN o.state = 'succeeded' THEN o.detail ELSE tasks.success_detail END,
	first_failure_at = CASE WHEN o.fail AND tasks.first_failure_at IS NULL THEN $now ELSE tasks.first_failure_at END,
	lease_id = NULL, lease_expires_at = NULL, updated_at = $now`

// outcomeQuery builds the statement applying n outcomes at once: an UPDATE
// joined to a VALUES list, conditional on each task running under the
// named lease, unexpired (expired for the reaper's outcome). The rows it
// returns are the outcomes that applied.
func outcomeQuery(n int) string {
	now := "?" + strconv.Itoa(n*outcomeCols+1)
	q := `WITH o(id, lease, state, run_at, prio, rel, has_err, code, msg, class, delay, reason, fail, reap, detail) AS (VALUES ` +
		placeholders(n, outcomeCols) + `)
	UPDATE tasks SET` + outcomeSet + `
	FROM o
	WHERE tasks.id = o.id AND tasks.state = 'running' AND tasks.lease_id = o.lease
		AND (CASE WHEN o.reap THEN tasks.lease_expires_at < $now ELSE tasks.lease_expires_at >= $now END)
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
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(p.Outcomes) == 0 {
		if err := s.check(op); err != nil {
			return nil, err
		}
		return []error{}, nil
	}
	p.Outcomes = store.CleanOutcomes(p.Outcomes) // one odd message must not fail the batch
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
			if !store.Fits32(o.EffectivePrio) {
				errs[i] = fmt.Errorf("record outcome of task %s: %w: effective priority %d does not fit in 32 bits", o.TaskID, store.ErrInvalid, o.EffectivePrio)
				continue
			}
			if err := store.CheckTime("run time", ra); err != nil {
				errs[i] = fmt.Errorf("record outcome of task %s: %w", o.TaskID, err)
				continue
			}
		case store.StateDead:
			r.failure = 1
			r.deadReason = o.DeadReason
		case store.StatePending:
			r.release = 1
			if o.RunAt.After(p.Now) {
				// A delayed release: due again at RunAt (store.Outcome).
				if err := store.CheckTime("run time", o.RunAt); err != nil {
					errs[i] = fmt.Errorf("record outcome of task %s: %w", o.TaskID, err)
					continue
				}
				r.state, r.runAt = string(store.StateRetryWaiting), o.RunAt.UnixMicro()
			}
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
	// An outcome batch may be held back from groups with inserts
	// (store.Holder).
	err := s.submit(ctx, op, &writeReq{outcome: true, fn: func(ctx context.Context, tx *sql.Tx) error {
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
			if o.State == store.StateSucceeded {
				continue // the task row is the record of its successful attempt
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
	}})
	if err != nil {
		return nil, err
	}
	return errs, nil
}
