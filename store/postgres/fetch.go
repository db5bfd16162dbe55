package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

const fetchPlanSettings = `SELECT set_config('enable_bitmapscan', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true)`

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
	lease_id = $6 || t.id, -- a random prefix per fetch (store.NewLeasePrefix)
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
	types, err := store.CheckFetch(p) // nil: any type
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	now := us(p.Now)
	var tasks []store.Task
	// Queue tables have volatile statistics: with a backlog that built up
	// after the last ANALYZE the planner would bitmap-scan and sort every
	// pending row on each fetch. Walking the pending index in order and
	// stopping after Limit lockable rows is always right. SET LOCAL holds
	// for the batch's implicit transaction.
	b := &pgx.Batch{}
	b.Queue(fetchPlanSettings)
	b.Queue(fetchSQL, p.Limit, types, us(p.Now.Add(p.LeaseDuration)), p.WorkerID, now, store.NewLeasePrefix())
	err = s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		tasks, err = collectTasks(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	store.SortDispatchOrder(tasks)
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
	if err := store.CheckNow(p.Now); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
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
