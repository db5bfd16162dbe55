package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/retryq/retryq/store"
)

// deadBatch is how many tasks one write transaction of RedriveDead or
// PurgeDead takes (deadRounds).
const deadBatch = 500

// deadSortMax bounds the matching dead tasks that the rounds of a
// RedriveDead or PurgeDead read, in all, through the filter's own index
// (and sort) for their keys, rather than walk every dead task in death
// order (deadRounds).
const deadSortMax = 20000

// deadKey is where a dead task is in the order RedriveDead and PurgeDead
// take them: oldest death first (updated_at, in µs), then by id.
type deadKey struct {
	at int64
	id string
}

// roundSelect selects the rowids of those of a round's n tasks (the first
// n parameters, their ids) that where (deadWhere, its parameters next)
// still selects. The CROSS JOIN has SQLite look each of them up, then
// apply the filter to it, rather than drive the statement by the filter's
// own list of ids (up to store.MaxDeadIDs) or some other index of it.
func roundSelect(where string, n int) string {
	return `SELECT tasks.rowid FROM (VALUES (` + inValues(n) + `)) AS sel
		CROSS JOIN tasks ON tasks.id = sel.column1 WHERE ` + where
}

// inValues is "?), (?" repeated for a VALUES list of n rows of one column.
func inValues(n int) string {
	out := make([]byte, 0, 5*n)
	for i := range n {
		if i > 0 {
			out = append(out, "), ("...)
		}
		out = append(out, '?')
	}
	return string(out)
}

// deadRounds runs RedriveDead's or PurgeDead's round (the statement over
// the given ids, see roundSelect, returning how many tasks it took) for
// the dead tasks that where selects (args its arguments) in deadKey
// order, at most deadBatch of them each, until the call has taken f.Limit
// tasks, or, without a Limit, as many as matched when it began (counted
// first, on the read pool), or no matching task is left. It returns how
// many tasks the committed rounds took. Tasks that another write took
// between the read of a round's keys and its write (a retry, a cancel,
// retention) are replaced by the next round's.
//
// The rounds take only the tasks up to the last matching key when the
// call began (read first): a task that dies during the call, one its
// first rounds redrove failing again, is after it (its death is later)
// and is not taken. Without that bound a call whose Limit went past the
// tasks that matched met such a task in a later round and redrove it a
// second time, counted twice.
//
// Each round is its own write, so the single writer is never held for a
// whole dead-letter queue (one transaction of 12,500 tasks of a 1M-task
// database held every enqueue for 8 s); and each round's keys are read
// on the read pool, after the last round's (deadKeys), so that the writer
// does only the work of the round's tasks: a round that chose its tasks
// inside its write, oldest death first, read and sorted every matching
// dead task, and held the writer for that: a purge of 200,000 dead tasks
// (that died in the order they were enqueued) took 19 s in 400 rounds,
// now 4.8 s.
func (s *Store) deadRounds(ctx context.Context, op string, f store.DeadFilter, where string, args []any,
	round func(ctx context.Context, tx *sql.Tx, ids []any) (int, error)) (int, error) {
	if err := s.check(op); err != nil {
		return 0, err
	}
	// A filter of ids, a type, an error code or a reason has an index of
	// its own (tasks_dead_type, _code, _reason; the primary key).
	indexed := len(f.IDs) > 0 || f.Type != "" || f.ErrorCode != "" || f.NoErrorCode || f.Reason != ""
	want, matched := f.Limit, -1
	if want == 0 || (indexed && len(f.IDs) == 0) {
		// Matches counted once: tasks that die meanwhile (a redriven one
		// failing again) do not keep a call without a Limit going.
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE `+where, args...).Scan(&matched); err != nil {
			return 0, s.translate(op, err)
		}
		if want == 0 {
			want = matched
		}
	}
	// The keys are read through the filter's index, and sorted, when that
	// reads fewer tasks than the walk of every dead task in death order
	// might: each round reads the matching tasks, at most deadSortMax
	// over all the rounds.
	walk := !indexed
	if indexed && len(f.IDs) == 0 {
		rounds := (min(want, matched) + deadBatch - 1) / deadBatch
		walk = matched*rounds > deadSortMax
	}
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
		ids := make([]any, len(keys))
		for i, key := range keys {
			ids[i] = key.id
		}
		var n int
		err = s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
			var err error
			n, err = round(ctx, tx, ids)
			return err
		})
		if err != nil {
			return total, err // this round rolled back; the earlier ones committed
		}
		total += n
		if len(keys) < k {
			break // no more matching tasks
		}
		after = &keys[len(keys)-1]
	}
	return total, nil
}

// lastDeadKey reads, on the read pool, the key of the last dead task f
// selects in deadKey order (nil when none does), through the index
// deadKeys reads with walk.
func (s *Store) lastDeadKey(ctx context.Context, op string, f store.DeadFilter, walk bool) (*deadKey, error) {
	where, args := deadWhere(f)
	q := `SELECT updated_at, id FROM tasks WHERE ` + where
	if walk {
		q = `SELECT updated_at, id FROM tasks INDEXED BY tasks_finished
			WHERE state IN ('succeeded', 'cancelled', 'dead') AND ` + where
	}
	var key deadKey
	err := s.r.QueryRowContext(ctx, q+` ORDER BY updated_at DESC, id DESC LIMIT 1`, args...).Scan(&key.at, &key.id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.translate(op, err)
	}
	return &key, nil
}

// deadKeys reads, on the read pool, the keys of the first k dead tasks
// that f selects (deadWhere) after after (nil: from the first) and up to
// upto (lastDeadKey when the call began), in deadKey order. With walk, they are read in order from tasks_finished
// (INDEXED BY, with the redundant IN term that lets SQLite use it): the
// rounds of a call read each dead task once, however many match, but
// every dead task, however few match. Otherwise SQLite reads those of
// the filter's own index (the primary key for ids) and sorts them.
func (s *Store) deadKeys(ctx context.Context, op string, f store.DeadFilter, after, upto *deadKey, k int, walk bool) ([]deadKey, error) {
	q, args := deadKeysQuery(f, after, upto, k, walk)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	keys := make([]deadKey, 0, k)
	for rows.Next() {
		var key deadKey
		if err := rows.Scan(&key.at, &key.id); err != nil {
			return nil, s.translate(op, err)
		}
		keys = append(keys, key)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	return keys, nil
}

// deadKeysQuery returns deadKeys' statement and its arguments.
func deadKeysQuery(f store.DeadFilter, after, upto *deadKey, k int, walk bool) (string, []any) {
	if after != nil {
		// The key matched the filter, so every task after it died at or
		// after f.Since; its term, which SQLite would use as the range of
		// tasks_finished instead of the key's (below), is left out.
		f.Since = time.Time{}
	}
	where, args := deadWhere(f)
	q := `SELECT updated_at, id FROM tasks WHERE ` + where
	if walk {
		q = `SELECT updated_at, id FROM tasks INDEXED BY tasks_finished
			WHERE state IN ('succeeded', 'cancelled', 'dead') AND ` + where
	}
	if after != nil {
		// SQLite reads tasks_finished from the key on (a vector range); a
		// term on updated_at alone would have it read from the first task
		// that died in the key's µs, every round again.
		q += ` AND (updated_at, id) > (?, ?)`
		args = append(args, after.at, after.id)
	}
	if upto != nil {
		q += ` AND (updated_at, id) <= (?, ?)`
		args = append(args, upto.at, upto.id)
	}
	return q + ` ORDER BY updated_at, id LIMIT ?`, append(args, k)
}
