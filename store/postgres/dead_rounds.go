package postgres

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// lockDeadSQL starts a WITH list whose CTE d holds those of the tasks
// whose ids the text array ids (a placeholder, in id order) holds that are
// dead and match the filter (where, over t), locked. A task another
// transaction holds is waited for, not skipped: skipping it (SKIP LOCKED)
// made a redrive or purge report fewer tasks than matched and silently
// leave the task dead when the holder left it as it was (a cancel of the
// dead task, a stale heartbeat, a purge or retention pass rolled back), as
// SQLite, with its single writer, never does. Once the holder is done the
// filter is applied to the task's row as it left it: a task it redrove or
// deleted meanwhile is no longer taken.
//
// Each task is found by its id alone, and locked, before the filter is
// applied (the LIMIT keeps the planner from pushing the filter into the
// lookup), so that no plan reads the filter's dead tasks through their
// index for each round: the planner, expecting a few matching dead tasks
// without statistics (or for an error code, whose partial index has
// none), joined the round's ids with all of them, 21,429 for a type among
// 1M tasks, in each of its 43 rounds. The tasks are locked in the order of
// ids, id order, as every other statement that locks several tasks takes
// them, so that two redrives, purges or outcome batches never wait for
// each other in a cycle. A task no longer dead stays locked until the
// round commits, and is not taken.
func lockDeadSQL(where, ids string) string {
	return `
WITH d AS MATERIALIZED (
	SELECT t.id FROM unnest(` + ids + `::text[]) AS sel(id) CROSS JOIN LATERAL (
		SELECT t.id, t.state, t.type, t.last_error_code, t.dead_reason, t.updated_at
		FROM tasks t WHERE t.id = sel.id LIMIT 1 FOR UPDATE
	) AS t
	WHERE ` + where + `
)`
}

// deadBatch is how many tasks one statement (one transaction) of
// RedriveDead or PurgeDead takes (deadRounds).
const deadBatch = 500

// deadKey is where a dead task is in the order RedriveDead and PurgeDead
// take them: oldest death first, then by id.
type deadKey struct {
	at time.Time
	id string
}

// deadKeysSQL returns the statement that reads the keys of the first k
// dead tasks matching f after key after (nil: from the first) and up to
// key upto (nil: no bound), in deadKey order, with its arguments.
func deadKeysSQL(f store.DeadFilter, after, upto *deadKey, k int) (string, []any) {
	where, args := deadWhere(f, nil)
	if after != nil {
		args = append(args, after.at, after.id)
		at, id := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		// The first term bounds the read of tasks_finished_idx.
		where += " AND t.updated_at >= " + at + " AND (t.updated_at, t.id) > (" + at + ", " + id + ")"
	}
	if upto != nil {
		args = append(args, upto.at, upto.id)
		at, id := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		where += " AND t.updated_at <= " + at + " AND (t.updated_at, t.id) <= (" + at + ", " + id + ")"
	}
	limit, args := limitClause(k, args)
	return `SELECT t.updated_at, t.id FROM tasks t WHERE ` + where + ` ORDER BY t.updated_at, t.id` + limit, args
}

// deadRounds runs RedriveDead's or PurgeDead's round (one statement over
// the given ids, see lockDeadSQL, returning how many tasks it took) for
// the matching tasks in deadKey order, at most deadBatch of them each,
// until the call has taken f.Limit tasks, or, without a Limit, as many
// as matched when it began (counted first), or no matching task is left.
// It returns how many tasks the committed rounds took. Tasks that a
// concurrent writer took while a round waited for them are replaced by
// the next round's.
//
// The rounds take only the tasks up to the last matching key when the
// call began (read first, lastDeadKey): a task that dies during the call,
// one its first rounds redrove failing again, is after it (its death is
// later) and is not taken. Without that bound a call whose Limit went
// past the tasks that matched met such a task in a later round and
// redrove it a second time, counted twice.
//
// A round takes at most deadBatch tasks: each statement is a transaction
// that holds its tasks' row locks until it commits, and one over a whole
// dead-letter queue (1M tasks, 100,000 dead: 3 to 9 s) held a cancel or
// retry of any of them, and any other redrive or purge, for all of it;
// and all its work was lost when it failed or was cancelled (a
// statement_timeout, the caller giving up).
//
// Each round first reads the keys of its tasks (deadKeys), after the last
// round's, so that the rounds together read the matching tasks once.
func (s *Store) deadRounds(ctx context.Context, op string, f store.DeadFilter, round func(ids []string) (int, error)) (int, error) {
	want := f.Limit
	if want == 0 {
		where, args := deadWhere(f, nil)
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t WHERE `+where, args...).Scan(&want); err != nil {
			return 0, translate(op, err)
		}
	}
	// With several rounds to run, the keys are read walking
	// tasks_finished_idx from the last round's (deadWalkSettings), unless
	// the filter names ids: the primary key finds those.
	walk := want > deadBatch && len(f.IDs) == 0
	upto, err := s.lastDeadKey(ctx, op, f, walk)
	if err != nil || upto == nil {
		return 0, err // nothing matches
	}
	total := 0
	var after *deadKey
	for total < want {
		k := min(deadBatch, want-total)
		keys, err := s.deadKeys(ctx, op, f, after, upto, k, walk)
		if err != nil {
			return total, err
		}
		if len(keys) == 0 {
			break
		}
		ids := make([]string, len(keys))
		for i, key := range keys {
			ids[i] = key.id
		}
		slices.Sort(ids) // the order lockDeadSQL locks them in: byte order, as "C"
		n, err := round(ids)
		total += n
		if err != nil {
			return total, err // this round rolled back; the earlier ones committed
		}
		if len(keys) < k {
			break // no more matching tasks
		}
		after = &keys[len(keys)-1]
	}
	return total, nil
}

// deadWalkSettings are deadListSettings, for the same reason: without
// statistics (or for an error code, whose partial index has none) the
// planner expects a few matching dead tasks and would rather read all of
// them through a dead tasks' index and sort them, for each round, than
// read the round's tasks in order from tasks_finished_idx (a redrive of
// 21,429 dead tasks of a type among 1M tasks: 43 rounds of 0.1-0.5 s).
const deadWalkSettings = deadListSettings

// lastDeadKey reads the key of the last dead task matching f in deadKey
// order (nil when none does); walk reads it under deadWalkSettings.
func (s *Store) lastDeadKey(ctx context.Context, op string, f store.DeadFilter, walk bool) (*deadKey, error) {
	where, args := deadWhere(f, nil)
	b := &pgx.Batch{}
	if walk {
		b.Queue(deadWalkSettings)
	}
	b.Queue(`SELECT t.updated_at, t.id FROM tasks t WHERE `+where+` ORDER BY t.updated_at DESC, t.id DESC LIMIT 1`, args...)
	var key *deadKey
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		if walk {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var k deadKey
		err := br.QueryRow().Scan(&k.at, &k.id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		key = &k
		return err
	})
	return key, err
}

// deadKeys reads the keys of the first k dead tasks matching f after
// after (nil: from the first) and up to upto (lastDeadKey when the call
// began), in deadKey order; walk reads them under deadWalkSettings.
func (s *Store) deadKeys(ctx context.Context, op string, f store.DeadFilter, after, upto *deadKey, k int, walk bool) ([]deadKey, error) {
	q, args := deadKeysSQL(f, after, upto, k)
	b := &pgx.Batch{}
	if walk {
		b.Queue(deadWalkSettings)
	}
	b.Queue(q, args...)
	keys := make([]deadKey, 0, k)
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		if walk {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var key deadKey
		_, err = pgx.ForEachRow(rows, []any{&key.at, &key.id}, func() error {
			keys = append(keys, key)
			return nil
		})
		return err
	})
	return keys, err
}

// deadRoundSettings have a round of RedriveDead or PurgeDead update or
// delete its tasks, and delete their history, through the primary key and
// attempts_task_idx, task by task, rather than join them by hash with a
// read of a whole index or table, for each round.
const deadRoundSettings = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true)`

// deadRound runs q, a statement of redriveDeadSQL or purgeDeadSQL with its
// arguments, under deadRoundSettings, in one batch (one implicit
// transaction, sent at once), and returns the count in its first column
// (of cols).
func (s *Store) deadRound(ctx context.Context, op, q string, args []any, cols int) (int, error) {
	b := &pgx.Batch{}
	b.Queue(deadRoundSettings)
	b.Queue(q, args...)
	var n int64
	dest := make([]any, cols)
	dest[0] = &n
	err := s.inBatch(ctx, op, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(dest...)
	})
	return int(n), err
}

// redriveDeadSQL returns the statement of one round of RedriveDead over
// the tasks whose ids the text array ids (a placeholder) holds that where
// selects ($1 is now): it returns how many tasks it retried and, read to
// make it run, the count of its wake-up (with notify, sent at commit when
// it retried any; NULL without).
func redriveDeadSQL(where, ids string, notify bool) string {
	woke, wake := "", "NULL::bigint"
	if notify {
		woke = `, woke AS MATERIALIZED (
	SELECT pg_notify(` + notifyChannelSQL + `, '') WHERE EXISTS (SELECT 1 FROM upd)
)`
		wake = "(SELECT count(*) FROM woke)"
	}
	return lockDeadSQL(where, ids) + `, upd AS (
	UPDATE tasks AS t SET ` + retrySet + `
	FROM d
	WHERE t.id = d.id
	RETURNING t.id
)` + woke + `
SELECT (SELECT count(*) FROM upd), ` + wake
}

// purgeDeadSQL returns the statement of one round of PurgeDead over the
// tasks whose ids the text array ids (a placeholder) holds that where
// selects: it returns how many tasks it deleted.
func purgeDeadSQL(where, ids string) string {
	return lockDeadSQL(where, ids) + `, da AS (
	DELETE FROM attempts AS a USING d WHERE a.task_id = d.id
), del AS (
	DELETE FROM tasks AS t USING d WHERE t.id = d.id RETURNING t.id
)
SELECT count(*) FROM del`
}
