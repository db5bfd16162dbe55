package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

// PutType implements store.Store.
func (s *Store) PutType(ctx context.Context, t store.TypeConfig, now time.Time) (store.TypeConfig, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.TypeConfig{}, fmt.Errorf("put type: %w", err)
	}
	op := "put type " + t.Type
	if err := store.CheckTypeConfig(t); err != nil {
		return store.TypeConfig{}, fmt.Errorf("put type: %w", err)
	}
	if err := store.CheckNow(now); err != nil {
		return store.TypeConfig{}, fmt.Errorf("%s: %w", op, err)
	}
	t.UpdatedAt = fromMicros(now.UnixMicro())
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, `INSERT INTO task_types (type, policy, timeout, priority, target, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (type) DO UPDATE SET policy = excluded.policy, timeout = excluded.timeout,
				priority = excluded.priority, target = excluded.target, updated_at = excluded.updated_at`)
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, t.Type, blob(t.Policy), int64(t.Timeout), t.Priority, blob(t.Target), now.UnixMicro())
		return err
	})
	if err != nil {
		return store.TypeConfig{}, err
	}
	return t, nil
}

const typeCols = `type, policy, timeout, priority, target, updated_at`

func scanType(sc scanner) (store.TypeConfig, error) {
	var t store.TypeConfig
	var timeout, upd int64
	var policy, target []byte
	if err := sc.Scan(&t.Type, &policy, &timeout, &t.Priority, &target, &upd); err != nil {
		return store.TypeConfig{}, err
	}
	t.Policy, t.Target = policy, target
	t.Timeout = time.Duration(timeout)
	t.UpdatedAt = fromMicros(upd)
	return t, nil
}

// GetType implements store.Store.
func (s *Store) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.TypeConfig{}, fmt.Errorf("get type: %w", err)
	}
	op := "get type " + typ
	if err := s.check(op); err != nil {
		return store.TypeConfig{}, err
	}
	t, err := scanType(s.r.QueryRowContext(ctx, `SELECT `+typeCols+` FROM task_types WHERE type = ?`, typ))
	if err != nil {
		return store.TypeConfig{}, s.translate(op, err)
	}
	return t, nil
}

// ListTypes implements store.Store.
func (s *Store) ListTypes(ctx context.Context) ([]store.TypeConfig, error) {
	const op = "list types"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+typeCols+` FROM task_types ORDER BY type`)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	out := []store.TypeConfig{}
	for rows.Next() {
		t, err := scanType(rows)
		if err != nil {
			return nil, s.translate(op, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	return out, nil
}

// AcquireLeader implements store.Store. A lease is held while Now is at or
// before its expiry; after that anyone may take it.
func (s *Store) AcquireLeader(ctx context.Context, p store.LeaderParams) (store.Lease, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Lease{}, fmt.Errorf("acquire leader lease: %w", err)
	}
	op := "acquire leader lease " + p.Name
	if p.Name == "" || p.NodeID == "" || p.TTL <= 0 {
		return store.Lease{}, fmt.Errorf("%s: name, node id and a positive TTL are required: %w", op, store.ErrInvalid)
	}
	if err := store.CheckKey("name", p.Name); err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckText("node id", p.NodeID); err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckLeaseEnd(p.Now, p.TTL); err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	var l store.Lease
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, `INSERT INTO leader_leases (name, node_id, expires_at) VALUES (?1, ?2, ?3)
			ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id, expires_at = excluded.expires_at
			WHERE leader_leases.node_id = excluded.node_id OR leader_leases.expires_at < ?4`)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, p.Name, p.NodeID, p.Now.Add(p.TTL).UnixMicro(), p.Now.UnixMicro()); err != nil {
			return err
		}
		var exp int64
		if err := tx.QueryRowContext(ctx, `SELECT name, node_id, expires_at FROM leader_leases WHERE name = ?`, p.Name).
			Scan(&l.Name, &l.NodeID, &exp); err != nil {
			return err
		}
		l.ExpiresAt = fromMicros(exp)
		return nil
	})
	return l, err
}

// ReleaseLeader implements store.Store.
func (s *Store) ReleaseLeader(ctx context.Context, p store.LeaderParams) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("release leader lease: %w", err)
	}
	return s.write(ctx, "release leader lease "+p.Name, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM leader_leases WHERE name = ? AND node_id = ?`, p.Name, p.NodeID)
		return err
	})
}

// GetLeader implements store.Store.
func (s *Store) GetLeader(ctx context.Context, name string) (store.Lease, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Lease{}, fmt.Errorf("get leader lease: %w", err)
	}
	op := "get leader lease " + name
	if err := s.check(op); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	var exp int64
	err := s.r.QueryRowContext(ctx, `SELECT name, node_id, expires_at FROM leader_leases WHERE name = ?`, name).
		Scan(&l.Name, &l.NodeID, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return store.Lease{}, s.translate(op, err)
	}
	l.ExpiresAt = fromMicros(exp)
	return l, nil
}

// HeartbeatNode implements store.Store.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, now time.Time) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("heartbeat node: %w", err)
	}
	if n.ID == "" {
		return fmt.Errorf("heartbeat node: empty id: %w", store.ErrInvalid)
	}
	if err := store.CheckKey("node id", n.ID); err != nil {
		return fmt.Errorf("heartbeat node: %w", err)
	}
	if err := store.CheckText("host, version and role", n.Host, n.Version, n.Role); err != nil {
		return fmt.Errorf("heartbeat node: %w", err)
	}
	if err := store.CheckNow(now); err != nil {
		return fmt.Errorf("heartbeat node %s: %w", n.ID, err)
	}
	if err := store.CheckTime("start time", n.StartedAt); err != nil {
		return fmt.Errorf("heartbeat node %s: %w", n.ID, err)
	}
	return s.write(ctx, "heartbeat node "+n.ID, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, `INSERT INTO nodes (id, host, version, role, started_at, last_seen)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, version = excluded.version, role = excluded.role,
				started_at = excluded.started_at, last_seen = excluded.last_seen`)
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, n.ID, n.Host, n.Version, n.Role, ts(n.StartedAt), now.UnixMicro())
		return err
	})
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context, since time.Time) ([]store.Node, error) {
	const op = "list nodes"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckTime("since", since); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, host, version, role, started_at, last_seen
		FROM nodes WHERE last_seen >= ? ORDER BY id`, tsNotNull(since))
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		var n store.Node
		var started sql.NullInt64
		var seen int64
		if err := rows.Scan(&n.ID, &n.Host, &n.Version, &n.Role, &started, &seen); err != nil {
			return nil, s.translate(op, err)
		}
		n.StartedAt, n.LastSeen = fromTS(started), fromMicros(seen)
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	return out, nil
}

// PruneNodes implements store.Store.
func (s *Store) PruneNodes(ctx context.Context, p store.PruneNodesParams) (int, error) {
	const op = "prune nodes"
	if err := store.CheckContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return 0, err
	}
	if p.SeenBefore.IsZero() {
		return 0, nil
	}
	if err := store.CheckTime("seen before", p.SeenBefore); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	var n int64
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM nodes WHERE last_seen < ?", p.SeenBefore.UnixMicro())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
