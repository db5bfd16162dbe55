package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

// extendLeasesSQL extends the leases still held; it returns the ids and
// lease ids it extended.
const extendLeasesSQL = `
WITH cur AS MATERIALIZED (
	SELECT t.id, x.exp FROM tasks t
	JOIN unnest($1::text[], $2::text[], $3::timestamptz[]) AS x(id, lease, exp) ON x.id = t.id
	WHERE t.state = 'running' AND t.lease_id = x.lease AND t.lease_expires_at >= $4
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE tasks AS t SET lease_expires_at = cur.exp
FROM cur
WHERE t.id = cur.id
RETURNING t.id, t.lease_id`

// ExtendLeases moves lease expiries with one conditional UPDATE.
func (s *Store) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	const op = "extend leases"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	errs := make([]error, len(p.Leases))
	if len(p.Leases) == 0 {
		return errs, nil
	}
	type ref struct{ id, lease string }
	// The rows to send: one per lease, the last valid entry naming it (a
	// lease named twice keeps the later expiry, as if the entries were
	// applied in order; the server would otherwise pick either).
	last := make(map[ref]int, len(p.Leases))
	for i, l := range p.Leases {
		switch {
		case l.ExpiresAt.IsZero():
			errs[i] = fmt.Errorf("extend lease of task %s: %w: zero ExpiresAt", l.TaskID, store.ErrInvalid)
		case store.CheckTime("expiry", l.ExpiresAt) != nil:
			errs[i] = fmt.Errorf("extend lease of task %s: %w", l.TaskID, store.CheckTime("expiry", l.ExpiresAt))
		case !store.ValidText(l.TaskID) || !store.ValidText(l.LeaseID):
			// No task or lease has such an id (and the server would refuse
			// it as text, failing every other heartbeat of the call).
			errs[i] = fmt.Errorf("extend lease of task %q lease %q: %w", l.TaskID, l.LeaseID, store.ErrLeaseLost)
		default:
			last[ref{l.TaskID, l.LeaseID}] = i
		}
	}
	ids := make([]string, 0, len(last))
	leases := make([]string, 0, len(last))
	exps := make([]time.Time, 0, len(last))
	for i, l := range p.Leases {
		if j, ok := last[ref{l.TaskID, l.LeaseID}]; ok && j == i {
			ids, leases, exps = append(ids, l.TaskID), append(leases, l.LeaseID), append(exps, us(l.ExpiresAt))
		}
	}
	if len(ids) == 0 {
		return errs, nil
	}
	// The rows are locked in id order, like RecordOutcomes does: a
	// heartbeat and an outcome batch of the same node touch the same rows,
	// and locking them in the join's (arbitrary) order deadlocked against
	// the id-ordered outcome batch, aborting it.
	rows, err := s.pool.Query(ctx, extendLeasesSQL, ids, leases, exps, us(p.Now))
	if err != nil {
		return nil, s.noted(translate(op, err))
	}
	ok := map[ref]bool{}
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.id, &r.lease); err != nil {
			rows.Close()
			return nil, translate(op, err)
		}
		ok[r] = true
	}
	if err := rows.Err(); err != nil {
		return nil, s.noted(translate(op, err))
	}
	for i, l := range p.Leases {
		if errs[i] == nil && !ok[ref{l.TaskID, l.LeaseID}] {
			errs[i] = fmt.Errorf("extend lease of task %s lease %s: %w", l.TaskID, l.LeaseID, store.ErrLeaseLost)
		}
	}
	return errs, nil
}

// ExpiredLeases lists running tasks whose lease expired before Now (a lease
// is current up to and including its expiry instant).
func (s *Store) ExpiredLeases(ctx context.Context, p store.ExpiredParams) ([]store.Task, error) {
	const op = "list expired leases"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	exclude, err := store.CheckExpired(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if exclude == nil {
		exclude = []string{}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM tasks t
WHERE t.state = 'running' AND t.lease_expires_at < $1 AND NOT (t.type = ANY($3::text[]))
ORDER BY t.lease_expires_at, t.id LIMIT $2`, us(p.Now), p.Limit, exclude)
	if err != nil {
		return nil, translate(op, err)
	}
	tasks, err := collectTasks(rows)
	if err != nil {
		return nil, translate(op, err)
	}
	if tasks == nil {
		tasks = []store.Task{}
	}
	return tasks, nil
}
