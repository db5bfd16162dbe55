package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// deadWhere builds the WHERE clause (over tasks aliased t) selecting dead
// tasks matching f; placeholders are numbered after the given args.
func deadWhere(f store.DeadFilter, args []any) (string, []any) {
	conds := []string{"t.state = 'dead'"}
	given := len(args)
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.Type != "" {
		add("t.type = ?", f.Type)
	}
	// The code as tasks_dead_code_idx indexes it: NULL (no last error) is ''.
	if f.ErrorCode != "" {
		add("coalesce(t.last_error_code, '') = ?", f.ErrorCode)
	}
	if f.NoErrorCode {
		conds = append(conds, "coalesce(t.last_error_code, '') = ''")
	}
	if f.Reason != "" {
		add("t.dead_reason = ?", f.Reason)
	}
	if !f.Since.IsZero() {
		add("t.updated_at >= ?", us(f.Since))
	}
	if !f.Before.IsZero() {
		add("t.updated_at < ?", us(f.Before))
	}
	if len(f.IDs) > 0 {
		ids := make([]string, 0, len(f.IDs))
		for _, id := range f.IDs {
			if store.ValidText(id) {
				ids = append(ids, id)
			}
		}
		add("t.id = ANY(?)", ids) // empty when no id is text: nothing matches
	}
	if !store.ValidText(f.Type) || !store.ValidText(f.ErrorCode) || !store.ValidText(f.Reason) {
		// No stored task has such a type, code or reason, and the server
		// would refuse the text and fail the call.
		conds, args = []string{"false"}, args[:given]
	}
	return strings.Join(conds, " AND "), args
}

// ListDead lists dead tasks matching the filter, newest id first.
func (s *Store) ListDead(ctx context.Context, f store.DeadFilter) ([]store.Task, string, error) {
	const op = "list dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		return nil, "", fmt.Errorf("%s: limit must be positive (got %d): %w", op, f.Limit, store.ErrInvalid)
	}
	if err := store.CheckCursor(f.Cursor); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckDeadFilter(f); err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return nil, "", werr
	}
	defer end()
	// tasks_dead_idx holds every dead task, and a filter on its type reads
	// a range of it; the probe finds the newest of a queue that an outage
	// filled without sorting them all (300 ms at 1M dead tasks).
	where, args := deadWhere(f, nil)
	q, args := probePage(where, []string{where}, args, f.Cursor, f.Limit)
	return s.page(ctx, op, deadListSettings, q, args, f.Limit, f.MaxBytes)
}

// deadListSettings are ListDead's listSettings, with bitmap scans and
// sorts off for the statement: without statistics (right after a bulk
// load) the planner expects a few dead tasks and would rather read all of
// them through a bitmap and sort them than read the page in order from
// the dead tasks' index that gives it (tasks_dead_idx, _id_idx, _code_idx,
// _reason_idx).
const deadListSettings = `SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`

// DeadSummary groups dead tasks by type, last error code and reason. Ties
// are in byte order, as on SQLite: the code and reason columns have the
// database's default collation, which need not be C. The window functions
// count every group before the LIMIT cuts them.
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
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return store.Summary{}, werr
	}
	defer end()
	settings, q, args := deadSummarySQL(p)
	b := &pgx.Batch{}
	if settings != "" {
		b.Queue(settings)
	}
	b.Queue(q, args...)
	out := store.Summary{Groups: []store.DeadGroup{}}
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
		var g store.DeadGroup
		_, err = pgx.ForEachRow(rows, []any{&g.Type, &g.ErrorCode, &g.Reason, &g.Count, &g.Oldest, &g.Newest, &out.GroupCount, &out.TaskCount}, func() error {
			g.Oldest, g.Newest = g.Oldest.UTC(), g.Newest.UTC()
			out.Groups = append(out.Groups, g)
			return nil
		})
		return err
	})
	if err != nil {
		return store.Summary{}, err
	}
	return out, nil
}

// deadSummarySQL returns DeadSummary's statement for p, with its
// arguments and the settings to run it under ("" for none).
//
// With a Since, the statement reads the tasks that died since then from
// tasks_finished_idx, in the order of their deaths, with sorts and bitmap
// scans off, so that no other plan is cheaper: the planner read every
// dead task through tasks_dead_id_idx instead (a partial index of dead
// tasks whose ids it takes to be as ordered as the table's, where they
// are spread over all of it) and dropped those that died before (1M
// tasks, 100,000 dead, 10,000 of them in the last day: 140-200 ms where
// the range took 12 ms), or, without statistics, every dead task of the
// type, code or reason filtered for.
func deadSummarySQL(p store.SummaryParams) (settings, q string, args []any) {
	where, args := deadWhere(store.DeadFilter{Type: p.Type, ErrorCode: p.ErrorCode, NoErrorCode: p.NoErrorCode,
		Reason: p.Reason, Since: p.Since}, nil)
	limit, args := limitClause(p.Limit, args)
	from := "tasks t\nWHERE " + where
	if !p.Since.IsZero() {
		settings = deadListSettings
		from = "(SELECT t.type, t.last_error_code, t.dead_reason, t.updated_at FROM tasks t\n\tWHERE " + where +
			"\n\tORDER BY t.updated_at) t"
	}
	return settings, `
SELECT t.type, coalesce(t.last_error_code, '') AS code, t.dead_reason, count(*), min(t.updated_at), max(t.updated_at),
	count(*) OVER (), (sum(count(*)) OVER ())::bigint
FROM ` + from + `
GROUP BY 1, 2, 3
ORDER BY 4 DESC, 1, coalesce(t.last_error_code, '') COLLATE "C", t.dead_reason COLLATE "C"` + limit, args
}

// limitClause returns " LIMIT $n" for a positive limit (0 = no limit).
func limitClause(limit int, args []any) (string, []any) {
	if limit <= 0 {
		return "", args
	}
	args = append(args, limit)
	return " LIMIT $" + strconv.Itoa(len(args)), args
}

// RedriveDead retries up to Limit matching dead tasks (oldest death first),
// in rounds of one statement over at most 500 tasks (deadBatch; see
// deadRounds and lockDeadSQL).
//
// Statements, not an explicit transaction: each round commits on the
// server, and its row locks go, whatever becomes of the reply. In an
// explicit transaction, a node whose network path is cut (or whose process
// is stopped) before the COMMIT would leave its session idle in it, holding
// the locks of the tasks it selected, which the next redrive and purge
// wait for, until the server noticed the dead peer (hours).
func (s *Store) RedriveDead(ctx context.Context, f store.DeadFilter) (int, error) {
	const op = "redrive dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return 0, err
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
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return 0, werr
	}
	defer end()
	return s.deadRounds(ctx, op, f, func(ids []string) (int, error) {
		where, args := deadWhere(f, []any{us(f.Now)})
		args = append(args, ids)
		return s.deadRound(ctx, op, redriveDeadSQL(where, "$"+strconv.Itoa(len(args)), !s.cfg.PollOnly), args, 2)
	})
}

// PurgeDead deletes matching dead tasks and their history (oldest death
// first), in rounds of one statement over at most 500 tasks (deadBatch;
// see deadRounds and lockDeadSQL).
func (s *Store) PurgeDead(ctx context.Context, f store.DeadFilter) (int, error) {
	const op = "purge dead tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return 0, err
	}
	if err := store.CheckLimit(f.Limit); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckDeadFilter(f); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return 0, werr
	}
	defer end()
	return s.deadRounds(ctx, op, f, func(ids []string) (int, error) {
		where, args := deadWhere(f, nil)
		args = append(args, ids)
		return s.deadRound(ctx, op, purgeDeadSQL(where, "$"+strconv.Itoa(len(args))), args, 1)
	})
}

// retentionRound bounds the tasks of each class one transaction of
// DeleteFinished deletes: a call without a Limit (or with a larger one)
// runs in rounds, so that no transaction deletes (and locks, and writes
// to the WAL) the whole of a large table at once.
const retentionRound = 1000

// retentionClass is one class of finished tasks DeleteFinished deletes.
type retentionClass struct {
	state  store.State
	cutoff time.Time
	n      *int     // deleted so far
	upto   *deadKey // the last task to delete when the call began
}

// DeleteFinished deletes up to Limit (0 = no limit) tasks per finished class
// older than its cut-off, oldest first, in rounds of at most
// retentionRound tasks per class (a Limit of at most retentionRound is
// one round), up to the last task of the class before its cut-off when
// the call began: tasks that finish during the call do not keep it
// going. With an error, the rounds committed before it stand and are in
// the result.
//
// Each round's statements go as one batch (one implicit transaction, sent
// at once), not in an explicit transaction: the deletion commits on the
// server, and its row locks go, whatever becomes of the reply. In an
// explicit transaction, a leader whose network path is cut (or whose
// process is stopped) before the COMMIT would leave its session idle in it,
// holding the locks of the tasks it selected (which the next leader's
// retention skips, and a redrive or purge waits for) and of the retention
// totals' rows until the server notices the dead peer (hours).
func (s *Store) DeleteFinished(ctx context.Context, p store.RetentionParams) (store.RetentionResult, error) {
	const op = "delete finished tasks"
	if err := store.CheckContext(ctx); err != nil {
		return store.RetentionResult{}, fmt.Errorf("%s: %w", op, err)
	}
	var res store.RetentionResult
	if err := s.check(op); err != nil {
		return res, err
	}
	if err := store.CheckRetention(p); err != nil {
		return res, fmt.Errorf("%s: %w", op, err)
	}
	var classes []*retentionClass
	b := &pgx.Batch{}
	for _, c := range []*retentionClass{
		{state: store.StateSucceeded, cutoff: p.SucceededBefore, n: &res.Succeeded},
		{state: store.StateCancelled, cutoff: p.CancelledBefore, n: &res.Cancelled},
		{state: store.StateDead, cutoff: p.DeadBefore, n: &res.Dead},
	} {
		if c.cutoff.IsZero() {
			continue
		}
		classes = append(classes, c)
		b.Queue(`SELECT updated_at, id FROM tasks WHERE state = $1 AND updated_at < $2
	ORDER BY updated_at DESC, id DESC LIMIT 1`, string(c.state), us(c.cutoff))
	}
	if len(classes) == 0 {
		return res, nil
	}
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		for _, c := range classes {
			var key deadKey
			err := br.QueryRow().Scan(&key.at, &key.id)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			c.upto = &key
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	live := classes[:0]
	for _, c := range classes {
		if c.upto != nil {
			live = append(live, c)
		}
	}
	for len(live) > 0 {
		asked, got := make([]int, len(live)), make([]int, len(live))
		b := &pgx.Batch{}
		for i, c := range live {
			asked[i] = retentionRound
			if p.Limit > 0 {
				asked[i] = min(asked[i], p.Limit-*c.n)
			}
			b.Queue(`
WITH d AS MATERIALIZED (
	SELECT id FROM tasks WHERE state = $1 AND updated_at < $2 AND updated_at <= $3 AND (updated_at, id) <= ($3, $4)
	ORDER BY updated_at, id LIMIT $5 FOR UPDATE SKIP LOCKED
), da AS (
	DELETE FROM attempts AS a USING d WHERE a.task_id = d.id
), del AS (
	DELETE FROM tasks AS t USING d WHERE t.id = d.id RETURNING t.type
), per AS (
	SELECT type, count(*) AS n FROM del GROUP BY type
), counted AS (
	INSERT INTO retention_totals AS r (type, state, deleted) SELECT type, $1, n FROM per ORDER BY type
	ON CONFLICT (type, state) DO UPDATE SET deleted = r.deleted + EXCLUDED.deleted
)
SELECT coalesce(sum(n), 0)::bigint FROM per`, string(c.state), us(c.cutoff), c.upto.at, c.upto.id, asked[i])
		}
		err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
			for i := range live {
				if err := br.QueryRow().Scan(&got[i]); err != nil {
					return err
				}
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

// Stats returns per-type counts by state and attempt counts since Since.
func (s *Store) Stats(ctx context.Context, p store.StatsParams) ([]store.TypeStats, error) {
	const op = "get stats"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckTime("since", p.Since); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	end, werr := s.operatorSlot(ctx, op)
	if werr != nil {
		return nil, werr
	}
	defer end()
	byType := map[string]*store.TypeStats{}
	get := func(typ string) *store.TypeStats {
		st, ok := byType[typ]
		if !ok {
			st = &store.TypeStats{Type: typ, Counts: map[store.State]int{}}
			byType[typ] = st
		}
		return st
	}
	err := s.inTx(ctx, op, func(tx pgx.Tx) error {
		// One snapshot for all the queries.
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT type, state, count(*) FROM tasks GROUP BY type, state")
		if err != nil {
			return err
		}
		for rows.Next() {
			var typ, state string
			var n int
			if err := rows.Scan(&typ, &state, &n); err != nil {
				rows.Close()
				return err
			}
			get(typ).Counts[store.State(state)] = n
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `
SELECT task_type,
	count(*) FILTER (WHERE number = 1),
	count(*) FILTER (WHERE number > 1),
	count(*) FILTER (WHERE outcome IN ('failed', 'lease_expired'))
FROM attempts WHERE finished_at >= $1 GROUP BY task_type`, us(p.Since))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var typ string
			var first, retries, failures int
			if err := rows.Scan(&typ, &first, &retries, &failures); err != nil {
				return err
			}
			st := get(typ)
			st.FirstAttempts, st.Retries, st.Failures = first, retries, failures
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		// Successful attempts live in their task rows (see ListAttempts).
		rows, err = tx.Query(ctx, `
SELECT type, count(*) FILTER (WHERE attempt = 1), count(*) FILTER (WHERE attempt > 1)
FROM tasks WHERE state = 'succeeded' AND updated_at >= $1 GROUP BY type`, us(p.Since))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var typ string
			var first, retries int
			if err := rows.Scan(&typ, &first, &retries); err != nil {
				return err
			}
			st := get(typ)
			st.FirstAttempts += first
			st.Retries += retries
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		var (
			typ, state string
			n          int
		)
		rows, err = tx.Query(ctx, "SELECT type, state, deleted FROM retention_totals")
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&typ, &state, &n}, func() error {
			st := get(typ)
			if st.RetentionDeleted == nil {
				st.RetentionDeleted = map[store.State]int{}
			}
			st.RetentionDeleted[store.State(state)] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.TypeStats, 0, len(byType))
	for _, st := range byType {
		out = append(out, *st)
	}
	sortStats(out)
	return out, nil
}
