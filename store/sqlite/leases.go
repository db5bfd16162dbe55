package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/retryq/retryq/store"
)

// ExtendLeases implements store.Store.
func (s *Store) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	const op = "extend leases"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(p.Leases) == 0 {
		if err := s.check(op); err != nil {
			return nil, err
		}
		return []error{}, nil
	}
	now := p.Now.UnixMicro()
	errs := make([]error, len(p.Leases))
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		clear(errs)
		st, err := s.txStmt(ctx, tx, `UPDATE tasks SET lease_expires_at = ?
			WHERE id = ? AND state = 'running' AND lease_id = ? AND lease_expires_at >= ?`)
		if err != nil {
			return err
		}
		for i, l := range p.Leases {
			if l.ExpiresAt.IsZero() {
				errs[i] = fmt.Errorf("extend lease of task %s: %w: zero ExpiresAt", l.TaskID, store.ErrInvalid)
				continue
			}
			if err := store.CheckTime("expiry", l.ExpiresAt); err != nil {
				errs[i] = fmt.Errorf("extend lease of task %s: %w", l.TaskID, err)
				continue
			}
			res, err := st.ExecContext(ctx, l.ExpiresAt.UnixMicro(), l.TaskID, l.LeaseID, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				errs[i] = fmt.Errorf("extend lease of task %s: %w", l.TaskID, store.ErrLeaseLost)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// ExpiredLeases implements store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, p store.ExpiredParams) ([]store.Task, error) {
	const op = "list expired leases"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	exclude, err := store.CheckExpired(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	args := make([]any, 0, 2+len(exclude))
	args = append(args, p.Now.UnixMicro())
	var notIn string
	if len(exclude) > 0 {
		notIn = ` AND type NOT IN (` + inList(len(exclude)) + `)`
		for _, t := range exclude {
			args = append(args, t)
		}
	}
	return s.queryTasks(ctx, op, `SELECT `+taskCols+` FROM tasks
		WHERE state = 'running' AND lease_expires_at < ?`+notIn+` ORDER BY lease_expires_at, id LIMIT ?`,
		append(args, p.Limit)...)
}
