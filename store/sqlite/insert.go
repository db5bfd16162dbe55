package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/retryq/retryq/store"
)

// InsertTasks implements store.Store.
func (s *Store) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	const op = "insert tasks"
	if len(p.Tasks) == 0 {
		return nil, s.check(op)
	}
	if p.Now.IsZero() {
		return nil, fmt.Errorf("%s: %w: zero Now", op, store.ErrInvalid)
	}
	now := p.Now.UnixMicro()
	var keys []any
	for i, nt := range p.Tasks {
		if nt.ID == "" || nt.Type == "" {
			return nil, fmt.Errorf("%s: task %d: %w: empty id or type", op, i, store.ErrInvalid)
		}
		if nt.IdempotencyKey != "" {
			keys = append(keys, nt.IdempotencyKey)
		}
	}
	results := make([]store.InsertResult, len(p.Tasks))
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		// Existing tasks holding one of the batch's idempotency keys. The
		// write lock is held since BEGIN IMMEDIATE, so none can appear
		// between this read and the insert.
		existing := make(map[string]store.Task)
		for len(keys) > 0 {
			n := min(len(keys), maxVars)
			rows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE idempotency_key IN (`+inList(n)+`)`, keys[:n]...)
			if err != nil {
				return err
			}
			ts, err := scanTasks(rows)
			if err != nil {
				return err
			}
			for _, t := range ts {
				existing[t.IdempotencyKey] = t
			}
			keys = keys[n:]
		}
		const cols = 16
		args := make([]any, 0, cols*len(p.Tasks))
		for i, nt := range p.Tasks {
			if nt.IdempotencyKey != "" {
				if t, ok := existing[nt.IdempotencyKey]; ok {
					results[i] = store.InsertResult{Task: t, Duplicate: true}
					continue
				}
			}
			runAt := nt.RunAt
			if runAt.IsZero() {
				runAt = p.Now
			}
			state := store.StatePending
			if runAt.After(p.Now) {
				state = store.StateScheduled
			}
			t := store.Task{
				ID: nt.ID, Type: nt.Type, Payload: nt.Payload, Priority: nt.Priority, EffectivePrio: nt.Priority,
				State: state, MaxAttempts: nt.MaxAttempts, IdempotencyKey: nt.IdempotencyKey,
				RunAt: fromMicros(runAt.UnixMicro()), CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now),
			}
			var leaseID, leaseExp, startedAt any
			if nt.Lease != nil && state == store.StatePending {
				t.State, t.Attempt = store.StateRunning, 1
				t.LeaseID, t.WorkerID = nt.Lease.LeaseID, nt.Lease.WorkerID
				t.LeaseExpiresAt = fromMicros(p.Now.Add(nt.Lease.Duration).UnixMicro())
				t.StartedAt = fromMicros(now)
				leaseID, leaseExp, startedAt = t.LeaseID, t.LeaseExpiresAt.UnixMicro(), now
			}
			results[i] = store.InsertResult{Task: t}
			if nt.IdempotencyKey != "" {
				existing[nt.IdempotencyKey] = t // later duplicates in this batch
			}
			args = append(args, t.ID, t.Type, blob(t.Payload), t.Priority, t.EffectivePrio, string(t.State),
				t.MaxAttempts, nullStr(t.IdempotencyKey), runAt.UnixMicro(), now, now,
				t.Attempt, leaseID, leaseExp, t.WorkerID, startedAt)
		}
		return s.insertRows(ctx, tx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state,
			max_attempts, idempotency_key, run_at, created_at, updated_at,
			attempt, lease_id, lease_expires_at, worker_id, started_at)`, cols, args)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
