package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

// insertJob is one InsertTasks call: its tasks, its Now and, once run, its
// results.
type insertJob struct {
	tasks   []store.NewTask
	now     time.Time
	results []store.InsertResult
}

// InsertTasks implements store.Store. Concurrent calls are merged into one
// statement by the writer (see group.go).
func (s *Store) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	const op = "insert tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(p.Tasks) == 0 {
		return []store.InsertResult{}, nil
	}
	if err := store.CheckNewTasks(p.Tasks); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckInsertLeases(p); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	job := &insertJob{tasks: p.Tasks, now: p.Now}
	err := s.submit(ctx, op, &writeReq{ins: job, fn: func(ctx context.Context, tx *sql.Tx) error {
		return s.insertJobs(ctx, tx, []*insertJob{job})
	}})
	if err != nil {
		return nil, err
	}
	return job.results, nil
}

// insertCols is the number of columns insertJobs writes per task.
const insertCols = 16

// insertJobs inserts the tasks of jobs, in order, with one idempotency-key
// lookup and multi-row INSERT statements, and sets each job's results. A
// task whose idempotency key is already taken, by a stored task or by an
// earlier task of jobs, is not inserted: its result is that task, marked
// Duplicate. The write lock is held since BEGIN IMMEDIATE, so no task can
// take a key between the lookup and the insert.
func (s *Store) insertJobs(ctx context.Context, tx *sql.Tx, jobs []*insertJob) error {
	var keys []any
	n := 0
	for _, j := range jobs {
		n += len(j.tasks)
		for _, nt := range j.tasks {
			if nt.IdempotencyKey != "" {
				keys = append(keys, nt.IdempotencyKey)
			}
		}
	}
	existing := make(map[string]store.Task)
	for len(keys) > 0 {
		k := min(len(keys), maxVars)
		rows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE idempotency_key IN (`+inList(k)+`)`, keys[:k]...)
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
		keys = keys[k:]
	}
	args := make([]any, 0, insertCols*n)
	for _, j := range jobs {
		j.results = make([]store.InsertResult, len(j.tasks))
		for i, nt := range j.tasks {
			if nt.IdempotencyKey != "" {
				if t, ok := existing[nt.IdempotencyKey]; ok {
					j.results[i] = store.InsertResult{Task: t, Duplicate: true}
					continue
				}
			}
			t := newTaskRow(nt, j.now)
			j.results[i] = store.InsertResult{Task: t}
			if nt.IdempotencyKey != "" {
				existing[nt.IdempotencyKey] = t // later duplicates in this batch
			}
			var leaseID, leaseExp, startedAt any
			if t.LeaseID != "" {
				leaseID, leaseExp, startedAt = t.LeaseID, tsNotNull(t.LeaseExpiresAt), tsNotNull(t.StartedAt)
			}
			args = append(args, t.ID, t.Type, blob(t.Payload), t.Priority, t.EffectivePrio, string(t.State),
				t.MaxAttempts, nullStr(t.IdempotencyKey), tsNotNull(t.RunAt), tsNotNull(t.CreatedAt), tsNotNull(t.UpdatedAt),
				t.Attempt, leaseID, leaseExp, t.WorkerID, startedAt)
		}
	}
	return s.insertRows(ctx, tx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state,
		max_attempts, idempotency_key, run_at, created_at, updated_at,
		attempt, lease_id, lease_expires_at, worker_id, started_at)`, insertCols, args)
}

// newTaskRow is the task nt becomes when inserted at now: scheduled when it
// runs later, pending, or running under nt.Lease when that is set.
func newTaskRow(nt store.NewTask, now time.Time) store.Task {
	at := fromMicros(now.UnixMicro())
	runAt := nt.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	state := store.StatePending
	if runAt.After(now) {
		state = store.StateScheduled
	}
	t := store.Task{
		ID: nt.ID, Type: nt.Type, Payload: nt.Payload, Priority: nt.Priority, EffectivePrio: nt.Priority,
		State: state, MaxAttempts: nt.MaxAttempts, IdempotencyKey: nt.IdempotencyKey,
		RunAt: fromMicros(runAt.UnixMicro()), CreatedAt: at, UpdatedAt: at,
	}
	if nt.Lease != nil && state == store.StatePending {
		t.State, t.Attempt = store.StateRunning, 1
		t.LeaseID, t.WorkerID = nt.Lease.LeaseID, nt.Lease.WorkerID
		t.LeaseExpiresAt = fromMicros(now.Add(nt.Lease.Duration).UnixMicro())
		t.StartedAt = at
	}
	return t
}
