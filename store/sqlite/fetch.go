package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/retryq/retryq/store"
)

// fetchQuery builds the FetchTasks statement for ntypes type filters. The
// candidate selection walks tasks_fetch (no filter) or tasks_fetch_type (one
// range per type, each bounded by the limit, merged in order), so its cost
// is proportional to the batch, not to the number of pending tasks. The
// candidates come from the covering index; then each one's payload size is
// looked up by rowid (length() of a BLOB reads no overflow pages) and
// summed in fetch order: only the candidates whose running total is within
// the byte bound (the last parameter), and always the first, are leased;
// the others are left untouched. Unbounded (MaxBytes 0), the statement
// leases the candidates as they come, with no sizes and no window: the
// in-process workers' fetches, which bulk and retry throughput rest on.
func fetchQuery(ntypes int, bounded bool) string {
	const order = ` ORDER BY effective_prio DESC, run_at, id`
	const cols = `rowid AS r, effective_prio, run_at, id`
	var cand string
	switch ntypes {
	case 0:
		cand = `SELECT ` + cols + ` FROM tasks WHERE state = 'pending'` + order + ` LIMIT ?`
	case 1:
		cand = `SELECT ` + cols + ` FROM tasks WHERE state = 'pending' AND type = ?` + order + ` LIMIT ?`
	default:
		parts := make([]string, ntypes)
		for i := range parts {
			parts[i] = `SELECT * FROM (SELECT ` + cols + ` FROM tasks
				WHERE state = 'pending' AND type = ?` + order + ` LIMIT ?)`
		}
		cand = `SELECT * FROM (` + strings.Join(parts, ` UNION ALL `) + `)` + order + ` LIMIT ?`
	}
	sel := `SELECT r FROM (` + cand + `)`
	if bounded {
		sel = `WITH cand AS MATERIALIZED (` + cand + `)
		SELECT r FROM (SELECT r, row_number() OVER w AS n,
			sum((SELECT coalesce(length(payload), 0) FROM tasks WHERE rowid = r)) OVER w AS total
		FROM cand WINDOW w AS (` + order + ` ROWS UNBOUNDED PRECEDING)) WHERE n = 1 OR total <= ?`
	}
	return `UPDATE tasks SET state = 'running', attempt = attempt + 1,
		lease_id = ? || printf('%x', rowid), lease_expires_at = ?, worker_id = ?, started_at = ?, updated_at = ?
		WHERE rowid IN (` + sel + `)
		RETURNING ` + taskCols
}

// FetchTasks implements store.Store.
func (s *Store) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	const op = "fetch tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	types, err := store.CheckFetch(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if p.MaxBytes < 0 {
		return nil, fmt.Errorf("%s: MaxBytes must not be negative (got %d): %w", op, p.MaxBytes, store.ErrInvalid)
	}
	bound := int64(math.MaxInt64)
	if p.MaxBytes > 0 {
		bound = int64(p.MaxBytes)
	}
	now := p.Now.UnixMicro()
	args := []any{store.NewLeasePrefix(), p.Now.Add(p.LeaseDuration).UnixMicro(), p.WorkerID, now, now}
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
	bounded := p.MaxBytes > 0
	key := "fetch#" + strconv.Itoa(len(types))
	if bounded {
		args = append(args, bound)
		key += "b"
	}
	var out []store.Task
	err = s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmtKey(ctx, tx, key, func() string { return fetchQuery(len(types), bounded) })
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
	store.SortDispatchOrder(out)
	return out, nil
}

// PromoteDue implements store.Store.
func (s *Store) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	const op = "promote due tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if p.Limit <= 0 {
		return 0, fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
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
func (s *Store) NextWakeup(ctx context.Context, p store.WakeupParams) (store.Wakeup, error) {
	const op = "get next wakeup"
	if err := store.CheckContext(ctx); err != nil {
		return store.Wakeup{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return store.Wakeup{}, err
	}
	exclude, err := store.CheckWakeup(p)
	if err != nil {
		return store.Wakeup{}, fmt.Errorf("%s: %w", op, err)
	}
	var notIn string
	args := make([]any, 0, len(exclude))
	if len(exclude) > 0 {
		notIn = ` AND type NOT IN (` + inList(len(exclude)) + `)`
		for _, t := range exclude {
			args = append(args, t)
		}
	}
	var run, lease sql.NullInt64
	err = s.r.QueryRowContext(ctx, `SELECT
		(SELECT min(run_at) FROM tasks WHERE state IN ('scheduled', 'retry_waiting')),
		(SELECT min(lease_expires_at) FROM tasks WHERE state = 'running'`+notIn+`)`, args...).Scan(&run, &lease)
	if err != nil {
		return store.Wakeup{}, s.translate(op, err)
	}
	return store.Wakeup{NextRunAt: fromTS(run), NextLeaseExpiry: fromTS(lease)}, nil
}
