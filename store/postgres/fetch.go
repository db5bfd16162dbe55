package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// fetchPlanSettings are the plan settings of a fetch: queue tables have
// volatile statistics, and with a backlog that built up after the last
// ANALYZE the planner would rather bitmap-scan or seq-scan every pending row
// on each fetch. Walking each type's range of the pending index in order,
// stopping after Limit lockable rows, is always right. Sorts stay on: the
// merge of several types' tasks sorts at most Limit rows per type, and a
// plan priced at disable_cost would pass jit_above_cost. JIT is off: a
// fetch of many types with a large limit is priced at one index range of
// Limit rows per type (256 types of 1000: over 180,000), and was
// JIT-compiled on every custom plan (tens to hundreds of milliseconds for a
// statement that reads and locks its rows in less).
const fetchPlanSettings = `SELECT set_config('enable_bitmapscan', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// fetchOneTypeSQL leases tasks of the one type $2[1]: its first $1
// lockable pending tasks in fetch order, from its range of
// tasks_pending_type_idx. It stops after $1 rows it can lock, whatever the
// backlog of other types. Before version 7 of the schema a fetch walked one
// index in fetch order and filtered by type, reading every pending task of
// other types ahead of the first match: behind a backlog of 200,000 tasks
// of one type, a fetch of another type took 165 ms.
const fetchOneTypeSQL = `
WITH due AS MATERIALIZED (
	SELECT id, coalesce(octet_length(payload), 0) AS size FROM tasks
	WHERE state = 'pending' AND type = ($2::text[])[1]
	ORDER BY effective_prio DESC, run_at, id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)` + fetchLeaseSQL

// fetchPeekSQL reads, without locking, the first $1 pending tasks of one
// type (ty.name) in fetch order, for peek.
const fetchPeekSQL = `
		SELECT type, effective_prio, run_at, id FROM tasks
		WHERE state = 'pending' AND type = ty.name
		ORDER BY effective_prio DESC, run_at, id
		LIMIT $1`

// fetchShareSQL follows peek (the type of each of the first $1 pending
// tasks of the types asked for, in fetch order, read unlocked) and names
// (the types asked for). Each type's share of peek is how many tasks the
// fetch leases of it: first locks, for each type, its first share lockable
// pending tasks from its range of tasks_pending_type_idx, walking past rows
// another fetch holds. When other fetches held so many rows that first
// falls short of $1, more takes the shortfall from every type the same way
// (each type's LIMIT is the shortfall; with none, it reads nothing). So a
// fetch locks what it leases and, only when others hold rows it wanted, up
// to the shortfall per type more: locking $1 rows per type and merging
// after locked $1 × types rows (all 200,000 pending tasks for a fetch of
// 1,000 over 256 types), each lock a WAL record, and rows a concurrent
// fetch then skipped without anyone leasing them.
const fetchShareSQL = `, share AS (
	SELECT type AS name, count(*) AS n FROM peek GROUP BY type
), first AS MATERIALIZED (
	SELECT c.* FROM share AS ty CROSS JOIN LATERAL (` + fetchLockSQL + `
		ORDER BY effective_prio DESC, run_at, id
		LIMIT ty.n
		FOR UPDATE SKIP LOCKED
	) AS c
), more AS MATERIALIZED (
	SELECT c.* FROM names AS ty CROSS JOIN LATERAL (` + fetchLockSQL + `
			AND id NOT IN (SELECT id FROM first)
		ORDER BY effective_prio DESC, run_at, id
		LIMIT greatest($1 - (SELECT count(*) FROM first), 0)
		FOR UPDATE SKIP LOCKED
	) AS c
), due AS MATERIALIZED (
	SELECT id, size FROM (SELECT * FROM first UNION ALL SELECT * FROM more) AS c
	ORDER BY c.effective_prio DESC, c.run_at, c.id
	-- first and more add up to $1 at most; the LIMIT tells the planner,
	-- which would otherwise join a larger due to tasks by walking its
	-- primary key.
	LIMIT $1
)`

// fetchLockSQL reads the pending tasks of one type (ty.name), for first
// and more, which add their order, LIMIT and lock.
const fetchLockSQL = `
		SELECT id, coalesce(octet_length(payload), 0) AS size, effective_prio, run_at FROM tasks
		WHERE state = 'pending' AND type = ty.name`

// fetchTypesSQL leases tasks of the types $2 (distinct, more than one):
// peek merges the first $1 of each type in fetch order and keeps the first
// $1, then fetchShareSQL locks each type's share.
const fetchTypesSQL = `
WITH names AS (
	SELECT name FROM unnest($2::text[]) AS ty(name)
), peek AS (
	SELECT c.type FROM names AS ty CROSS JOIN LATERAL (` + fetchPeekSQL + `
	) AS c
	ORDER BY c.effective_prio DESC, c.run_at, c.id
	LIMIT $1
)` + fetchShareSQL + fetchLeaseSQL

// fetchAnySQL leases tasks of any type ($2 is NULL; it keeps the
// statements' parameters alike). It finds the types that have pending
// tasks with one probe of tasks_pending_type_idx per type (a loose index
// scan), then reads as fetchTypesSQL. No engine path fetches without types.
const fetchAnySQL = `
WITH RECURSIVE names(name) AS (
	(SELECT type FROM tasks WHERE state = 'pending' AND $2::text[] IS NULL ORDER BY type LIMIT 1)
	UNION ALL
	SELECT (SELECT t.type FROM tasks AS t WHERE t.state = 'pending' AND t.type > names.name ORDER BY t.type LIMIT 1)
	FROM names WHERE names.name IS NOT NULL
), peek AS (
	SELECT c.type FROM names AS ty CROSS JOIN LATERAL (` + fetchPeekSQL + `
	) AS c
	ORDER BY c.effective_prio DESC, c.run_at, c.id
	LIMIT $1
)` + fetchShareSQL + fetchLeaseSQL

// fetchLeaseSQL leases the candidates of due (id, size), in due's order,
// whose running total of payload bytes is within $7, and always the first.
// Parameters: $3 the lease expiry, $4 the worker, $5 now, $6 the lease
// prefix, $7 the byte bound.
const fetchLeaseSQL = `, cut AS (
	-- The running total in fetch order: the window takes due's rows in the
	-- order they were materialized, which is the ORDER BY's (a window
	-- ORDER BY would sort them again).
	SELECT id, row_number() OVER w AS n, sum(size) OVER w AS total FROM due
	WINDOW w AS (ROWS UNBOUNDED PRECEDING)
)
UPDATE tasks AS t SET
	state = 'running',
	attempt = t.attempt + 1,
	lease_id = $6 || t.id, -- a random prefix per fetch (store.NewLeasePrefix)
	lease_expires_at = $3,
	worker_id = $4,
	started_at = $5,
	updated_at = $5
FROM cut
WHERE t.id = cut.id AND (cut.n = 1 OR cut.total <= $7)
RETURNING ` + taskCols

// FetchTasks leases up to Limit pending tasks with one UPDATE over
// FOR UPDATE SKIP LOCKED subqueries, one per type (fetchStatement):
// concurrent fetchers skip each other's rows instead of waiting, and never
// lease the same task. The subqueries read each candidate's payload size
// (octet_length of a bytea reads no TOAST); the UPDATE leases the
// candidates whose running total in fetch order is within MaxBytes, and
// always the first. Candidates past the bound are locked for the statement
// only and left unchanged.
func (s *Store) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	const op = "fetch tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	types, err := store.CheckFetch(p) // nil: any type
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
	now := us(p.Now)
	var tasks []store.Task
	// The plan settings (SET LOCAL) hold for the batch's implicit
	// transaction.
	b := &pgx.Batch{}
	b.Queue(fetchPlanSettings)
	b.Queue(fetchStatement(types), p.Limit, types, us(p.Now.Add(p.LeaseDuration)), p.WorkerID, now, store.NewLeasePrefix(), bound)
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
	s.noteWrite(err)
	if err != nil {
		return nil, err
	}
	store.SortDispatchOrder(tasks)
	if tasks == nil {
		tasks = []store.Task{}
	}
	return tasks, nil
}

// fetchStatement returns the statement of a fetch of types (nil: any type).
func fetchStatement(types []string) string {
	switch len(types) {
	case 0:
		return fetchAnySQL
	case 1:
		return fetchOneTypeSQL
	default:
		return fetchTypesSQL
	}
}

// PromoteDue moves due scheduled/retry_waiting tasks to pending, and
// wakes the fetchers of every node when it moved any.
//
// It is one statement, outside any explicit transaction: the promotion
// commits on the server (and its row locks go) whatever becomes of its
// reply. In a transaction, a leader whose network path is cut (or whose
// process is stopped) before the COMMIT would leave its session idle in the
// transaction, holding the locks of every task it selected until the
// server notices the dead peer (hours with default keepalives); the next
// leader's promotion skips locked rows, so those tasks would wait as long.
func (s *Store) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	const op = "promote due tasks"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return 0, err
	}
	if p.Limit <= 0 {
		return 0, fmt.Errorf("%s: limit must be positive (got %d): %w", op, p.Limit, store.ErrInvalid)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	sql := promoteSQL
	if !s.cfg.PollOnly {
		sql = promoteNotifySQL
	}
	var n int
	if err := s.pool.QueryRow(ctx, sql, us(p.Now), p.Limit).Scan(&n, nil); err != nil {
		return 0, s.noted(translate(op, err))
	}
	return n, nil
}

// promoteHead is the promotion of up to $2 tasks due at $1, up to the
// result's columns. The update finds the batch by primary key (id =
// ANY of the locked ids, evaluated once): as a join with the batch, the
// planner estimated a full batch of 1000 rows dearer by primary key than
// by hashing a sequential scan of the whole table, finished tasks and
// all, and did so on every promotion.
const promoteHead = `
WITH moved AS (
	UPDATE tasks AS t SET state = 'pending', updated_at = $1
	WHERE t.id = ANY (ARRAY(
		SELECT id FROM tasks
		WHERE state IN ('scheduled', 'retry_waiting') AND run_at <= $1
		ORDER BY run_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	))
	RETURNING 1
), counted AS (
	SELECT count(*)::bigint AS n FROM moved
)
SELECT counted.n, `

// promoteSQL promotes up to $2 tasks due at $1; it returns how many, and a
// second column that promoteNotifySQL computes.
const promoteSQL = promoteHead + `NULL::text FROM counted`

// promoteNotifySQL is promoteSQL that also sends the wake-up notification
// (at its commit) when it promoted any task: a column of the result, so
// the server computes it for the one row.
const promoteNotifySQL = promoteHead + `CASE WHEN counted.n > 0 THEN pg_notify(` + notifyChannelSQL + `, '')::text END FROM counted`

// NextWakeup returns the earliest due time and lease expiry.
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
	if exclude == nil {
		exclude = []string{}
	}
	var runAt, exp *time.Time
	err = s.pool.QueryRow(ctx, `SELECT
	(SELECT min(run_at) FROM tasks WHERE state IN ('scheduled', 'retry_waiting')),
	(SELECT min(lease_expires_at) FROM tasks WHERE state = 'running' AND NOT (type = ANY($1::text[])))`, exclude).Scan(&runAt, &exp)
	if err != nil {
		return store.Wakeup{}, translate(op, err)
	}
	return store.Wakeup{NextRunAt: fromNull(runAt), NextLeaseExpiry: fromNull(exp)}, nil
}
