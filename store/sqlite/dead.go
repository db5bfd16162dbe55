package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// deadWhere builds the conditions selecting the dead tasks of f, in the
// forms that the indexes of ListDead's filters serve (tasks_dead_type,
// _code, _reason).
func deadWhere(f store.DeadFilter) (string, []any) {
	conds := []string{"state = 'dead'"}
	var args []any
	if f.Type != "" {
		conds = append(conds, "type = ?")
		args = append(args, f.Type)
	}
	// The code as tasks_dead_code indexes it: NULL (no last error) is ''.
	if f.ErrorCode != "" {
		conds = append(conds, "coalesce(last_error_code, '') = ?")
		args = append(args, f.ErrorCode)
	}
	if f.NoErrorCode {
		conds = append(conds, "coalesce(last_error_code, '') = ''")
	}
	if f.Reason != "" {
		conds = append(conds, "dead_reason = ?")
		args = append(args, f.Reason)
	}
	if !f.Since.IsZero() {
		conds = append(conds, "updated_at >= ?")
		args = append(args, f.Since.UnixMicro())
	}
	if !f.Before.IsZero() {
		conds = append(conds, "updated_at < ?")
		args = append(args, f.Before.UnixMicro())
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "id IN ("+inList(len(f.IDs))+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	return strings.Join(conds, " AND "), args
}

// sqlLimit maps a checked Limit (store.CheckLimit) to SQLite's: 0 means
// none, which SQLite spells -1.
func sqlLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// ListDead implements store.Store.
func (s *Store) ListDead(ctx context.Context, f store.DeadFilter) ([]store.Task, string, error) {
	const op = "list dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if f.Limit <= 0 {
		return nil, "", fmt.Errorf("%s: %w: Limit must be positive", op, store.ErrInvalid)
	}
	if err := store.CheckDeadFilter(f); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckCursor(f.Cursor); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	where, args := deadWhere(f)
	if f.Cursor != "" {
		where += " AND id < ?"
		args = append(args, f.Cursor)
	}
	// tasks_dead_id, or with a type, code or reason the index of one of
	// them (tasks_dead_type, _code, _reason), in id order.
	q, args := walkPage(" WHERE "+where, args, f.Limit)
	return s.page(ctx, op, q, args, f.Limit, f.MaxBytes)
}

// DeadSummary implements store.Store. A NULL and an empty error code are
// one group; the window functions count every group before the LIMIT cuts
// them. Text compares in byte order (BINARY), as Go strings do.
func (s *Store) DeadSummary(ctx context.Context, p store.SummaryParams) (store.Summary, error) {
	const op = "summarize dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return store.Summary{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return store.Summary{}, err
	}
	if err := store.CheckLimit(p.Limit); err != nil {
		return store.Summary{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckTime("since", p.Since); err != nil {
		return store.Summary{}, fmt.Errorf("%s: %w", op, err)
	}
	where, args := deadWhere(store.DeadFilter{Type: p.Type, ErrorCode: p.ErrorCode, NoErrorCode: p.NoErrorCode,
		Reason: p.Reason, Since: p.Since})
	rows, err := s.r.QueryContext(ctx, deadSummaryQuery(where), append(args, sqlLimit(p.Limit))...)
	if err != nil {
		return store.Summary{}, s.translate(op, err)
	}
	defer rows.Close()
	out := store.Summary{Groups: []store.DeadGroup{}}
	for rows.Next() {
		var g store.DeadGroup
		var oldest, newest int64
		if err := rows.Scan(&g.Type, &g.ErrorCode, &g.Reason, &g.Count, &oldest, &newest, &out.GroupCount, &out.TaskCount); err != nil {
			return store.Summary{}, s.translate(op, err)
		}
		g.Oldest, g.Newest = fromMicros(oldest), fromMicros(newest)
		out.Groups = append(out.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return store.Summary{}, s.translate(op, err)
	}
	return out, nil
}

// deadSummaryQuery is DeadSummary's statement over the dead tasks where
// selects (deadWhere), its last parameter the LIMIT. It reads the covering
// index tasks_dead_group (INDEXED BY: the indexes of ListDead's filters
// would cost a table row per task, 12,375 tasks of an error code took 45 ms
// through tasks_dead_code instead of 10); the groups are sorted by size in
// a temporary B-tree, as they must be.
func deadSummaryQuery(where string) string {
	return `SELECT type, coalesce(last_error_code, '') AS code, dead_reason,
		count(*) AS n, min(updated_at), max(updated_at), count(*) OVER (), sum(count(*)) OVER ()
		FROM tasks INDEXED BY tasks_dead_group WHERE ` + where + `
		GROUP BY type, code, dead_reason
		ORDER BY n DESC, type, code, dead_reason
		LIMIT ?`
}

// RedriveDead implements store.Store.
func (s *Store) RedriveDead(ctx context.Context, f store.DeadFilter) (int, error) {
	const op = "redrive dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckLimit(f.Limit); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckNow(f.Now); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckDeadFilter(f); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	where, args := deadWhere(f)
	return s.deadRounds(ctx, op, f, where, args, func(ctx context.Context, tx *sql.Tx, ids []any) (int, error) {
		res, err := tx.ExecContext(ctx, `UPDATE tasks SET `+retrySet+`
			WHERE rowid IN (`+roundSelect(where, len(ids))+`)`,
			append(append([]any{f.Now.UnixMicro()}, ids...), args...)...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		return int(n), err
	})
}

// PurgeDead implements store.Store.
func (s *Store) PurgeDead(ctx context.Context, f store.DeadFilter) (int, error) {
	const op = "purge dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckLimit(f.Limit); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckDeadFilter(f); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	where, args := deadWhere(f)
	return s.deadRounds(ctx, op, f, where, args, func(ctx context.Context, tx *sql.Tx, ids []any) (int, error) {
		byType, err := deleteTasks(ctx, tx, roundSelect(where, len(ids)), append(ids[:len(ids):len(ids)], args...))
		return total(byType), err
	})
}

// deleteTasks deletes the tasks whose rowids sel selects, and their history,
// and returns how many tasks of each type were deleted.
func deleteTasks(ctx context.Context, tx *sql.Tx, sel string, args []any) (map[string]int, error) {
	rows, err := tx.QueryContext(ctx, `DELETE FROM tasks WHERE rowid IN (`+sel+`) RETURNING id, type`, args...)
	if err != nil {
		return nil, err
	}
	var ids []any
	byType := map[string]int{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
		byType[typ]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for len(ids) > 0 {
		k := min(len(ids), maxVars)
		if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE task_id IN (`+inList(k)+`)`, ids[:k]...); err != nil {
			return nil, err
		}
		ids = ids[k:]
	}
	return byType, nil
}

// total is the sum of a per-type count.
func total(byType map[string]int) int {
	n := 0
	for _, k := range byType {
		n += k
	}
	return n
}

// retentionRound bounds the tasks of each class one transaction of
// DeleteFinished deletes: a call without a Limit (or with a larger one)
// runs in rounds, each its own write, so that the single writer is never
// held for the whole of a large table (every enqueue waits for it).
const retentionRound = 1000

// retentionClass is one class of finished tasks DeleteFinished deletes.
type retentionClass struct {
	state  store.State
	before time.Time
	n      *int     // deleted so far
	upto   *deadKey // the last task to delete when the call began
}

// DeleteFinished implements store.Store. Each class's tasks are deleted
// in rounds of at most retentionRound, each round one transaction for
// every class with tasks left (a Limit of at most retentionRound is one
// round), up to the last task of the class before its cut-off when the
// call began: tasks that finish during the call do not keep it going.
func (s *Store) DeleteFinished(ctx context.Context, p store.RetentionParams) (store.RetentionResult, error) {
	const op = "delete finished tasks"
	if err := store.CheckContext(ctx); err != nil {
		return store.RetentionResult{}, fmt.Errorf("%s: %w", op, err)
	}
	var res store.RetentionResult
	if err := store.CheckRetention(p); err != nil {
		return res, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return res, err
	}
	var live []*retentionClass
	for _, c := range []*retentionClass{
		{state: store.StateSucceeded, before: p.SucceededBefore, n: &res.Succeeded},
		{state: store.StateCancelled, before: p.CancelledBefore, n: &res.Cancelled},
		{state: store.StateDead, before: p.DeadBefore, n: &res.Dead},
	} {
		if c.before.IsZero() {
			continue
		}
		var key deadKey
		// The redundant IN term lets SQLite use the partial index.
		err := s.r.QueryRowContext(ctx, `SELECT updated_at, id FROM tasks
			WHERE state IN ('succeeded', 'cancelled', 'dead') AND state = ? AND updated_at < ?
			ORDER BY updated_at DESC, id DESC LIMIT 1`, string(c.state), c.before.UnixMicro()).Scan(&key.at, &key.id)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return res, s.translate(op, err)
		}
		c.upto = &key
		live = append(live, c)
	}
	for len(live) > 0 {
		asked, got := make([]int, len(live)), make([]int, len(live))
		for i, c := range live {
			asked[i] = retentionRound
			if p.Limit > 0 {
				asked[i] = min(asked[i], p.Limit-*c.n)
			}
		}
		err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
			for i, c := range live {
				byType, err := deleteTasks(ctx, tx, `SELECT rowid FROM tasks
					WHERE state IN ('succeeded', 'cancelled', 'dead') AND state = ? AND updated_at < ?
						AND (updated_at, id) <= (?, ?)
					ORDER BY updated_at, id LIMIT ?`,
					[]any{string(c.state), c.before.UnixMicro(), c.upto.at, c.upto.id, asked[i]})
				if err != nil {
					return err
				}
				for typ, n := range byType {
					if _, err := tx.ExecContext(ctx, `INSERT INTO retention_totals (type, state, deleted) VALUES (?, ?, ?)
						ON CONFLICT (type, state) DO UPDATE SET deleted = deleted + excluded.deleted`, typ, string(c.state), n); err != nil {
						return err
					}
				}
				got[i] = total(byType)
			}
			return nil
		})
		if err != nil {
			return res, err // this round rolled back; the earlier ones committed
		}
		left := live[:0]
		for i, c := range live {
			*c.n += got[i]
			if got[i] == asked[i] && (p.Limit == 0 || *c.n < p.Limit) {
				left = append(left, c)
			}
		}
		live = left
	}
	return res, nil
}

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context, p store.StatsParams) ([]store.TypeStats, error) {
	const op = "get stats"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckTime("since", p.Since); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to keep
	byType := map[string]*store.TypeStats{}
	get := func(typ string) *store.TypeStats {
		ts, ok := byType[typ]
		if !ok {
			ts = &store.TypeStats{Type: typ, Counts: map[store.State]int{}}
			byType[typ] = ts
		}
		return ts
	}
	var (
		typ, state               string
		n                        int
		first, retries, failures float64
	)
	// One read transaction, so one snapshot for all the queries.
	err = eachRow(ctx, tx, `SELECT type, state, count(*) FROM tasks GROUP BY type, state`, nil,
		[]any{&typ, &state, &n}, func() { get(typ).Counts[store.State(state)] = n })
	if err == nil {
		err = eachRow(ctx, tx, `SELECT task_type, total(number = 1), total(number > 1),
			total(outcome IN ('failed', 'lease_expired'))
			FROM attempts WHERE finished_at >= ? GROUP BY task_type`, []any{tsNotNull(p.Since)},
			[]any{&typ, &first, &retries, &failures}, func() {
				ts := get(typ)
				ts.FirstAttempts, ts.Retries, ts.Failures = int(first), int(retries), int(failures)
			})
	}
	if err == nil {
		// Successful attempts live in their task rows (see ListAttempts).
		err = eachRow(ctx, tx, `SELECT type, total(attempt = 1), total(attempt > 1)
			FROM tasks WHERE state IN ('succeeded', 'cancelled', 'dead') AND state = 'succeeded' AND updated_at >= ?
			GROUP BY type`, []any{tsNotNull(p.Since)},
			[]any{&typ, &first, &retries}, func() {
				ts := get(typ)
				ts.FirstAttempts += int(first)
				ts.Retries += int(retries)
			})
	}
	if err == nil {
		err = eachRow(ctx, tx, `SELECT type, state, deleted FROM retention_totals`, nil,
			[]any{&typ, &state, &n}, func() {
				ts := get(typ)
				if ts.RetentionDeleted == nil {
					ts.RetentionDeleted = map[store.State]int{}
				}
				ts.RetentionDeleted[store.State(state)] = n
			})
	}
	if err != nil {
		return nil, s.translate(op, err)
	}
	out := make([]store.TypeStats, 0, len(byType))
	for _, ts := range byType {
		out = append(out, *ts)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// eachRow runs query in tx, scans each row into dest and calls fn after
// each scan.
func eachRow(ctx context.Context, tx *sql.Tx, query string, args, dest []any, fn func()) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		fn()
	}
	return rows.Err()
}
