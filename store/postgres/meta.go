package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

func sortStats(s []store.TypeStats) {
	sort.Slice(s, func(i, j int) bool { return s[i].Type < s[j].Type })
}

const typeCols = "type, policy, timeout_ns, priority, target, updated_at"

func scanType(row pgx.Row) (store.TypeConfig, error) {
	var (
		t              store.TypeConfig
		policy, target []byte
		timeout        int64
	)
	if err := row.Scan(&t.Type, &policy, &timeout, &t.Priority, &target, &t.UpdatedAt); err != nil {
		return t, err
	}
	if policy != nil {
		t.Policy = policy
	}
	if target != nil {
		t.Target = target
	}
	t.Timeout = time.Duration(timeout)
	t.UpdatedAt = t.UpdatedAt.UTC()
	return t, nil
}

// PutType inserts or replaces a type's configuration.
func (s *Store) PutType(ctx context.Context, t store.TypeConfig, now time.Time) (store.TypeConfig, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.TypeConfig{}, fmt.Errorf("put type: %w", err)
	}
	op := "put type " + t.Type
	if err := s.check(op); err != nil {
		return store.TypeConfig{}, err
	}
	if err := store.CheckTypeConfig(t); err != nil {
		return store.TypeConfig{}, fmt.Errorf("put type: %w", err)
	}
	if err := store.CheckNow(now); err != nil {
		return store.TypeConfig{}, fmt.Errorf("%s: %w", op, err)
	}
	out, err := scanType(s.pool.QueryRow(ctx, `
INSERT INTO task_types (`+typeCols+`) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (type) DO UPDATE SET policy = EXCLUDED.policy, timeout_ns = EXCLUDED.timeout_ns,
	priority = EXCLUDED.priority, target = EXCLUDED.target, updated_at = EXCLUDED.updated_at
RETURNING `+typeCols, t.Type, []byte(t.Policy), int64(t.Timeout), t.Priority, []byte(t.Target), us(now)))
	if err != nil {
		return store.TypeConfig{}, s.noted(translate(op, err))
	}
	return out, nil
}

const getTypeSQL = "SELECT " + typeCols + " FROM task_types WHERE type = $1"

// GetType returns a type's configuration.
func (s *Store) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.TypeConfig{}, fmt.Errorf("get type: %w", err)
	}
	op := "get type " + typ
	if err := s.check(op); err != nil {
		return store.TypeConfig{}, err
	}
	if !store.ValidText(typ) {
		return store.TypeConfig{}, fmt.Errorf("%s: %w", op, store.ErrNotFound) // PutType refuses such a name
	}
	t, err := scanType(s.pool.QueryRow(ctx, getTypeSQL, typ))
	if err != nil {
		return store.TypeConfig{}, translate(op, err)
	}
	return t, nil
}

// ListTypes returns all configured types ordered by name.
func (s *Store) ListTypes(ctx context.Context) ([]store.TypeConfig, error) {
	const op = "list types"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+typeCols+" FROM task_types ORDER BY type")
	if err != nil {
		return nil, translate(op, err)
	}
	defer rows.Close()
	out := []store.TypeConfig{}
	for rows.Next() {
		t, err := scanType(rows)
		if err != nil {
			return nil, translate(op, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(op, err)
	}
	return out, nil
}

// AcquireLeader takes or renews the named lease with one upsert whose update
// only applies when the caller holds the lease or it expired before Now (a
// lease is held up to and including its expiry instant).
//
// Each statement runs on its own, outside any explicit transaction. The
// upsert locks the lease row even when its condition refuses the update, and
// inside a transaction that lock would last until the COMMIT: a node whose
// network path is cut (or whose process is stopped) between the upsert and
// the COMMIT would leave its session idle in the transaction, holding the
// lock until the server notices the dead peer (hours with default
// keepalives), and no node could take or renew the lease meanwhile. A
// statement on its own commits, and releases the lock, on the server
// whatever becomes of its reply.
func (s *Store) AcquireLeader(ctx context.Context, p store.LeaderParams) (store.Lease, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Lease{}, fmt.Errorf("acquire leader lease: %w", err)
	}
	op := "acquire leader lease " + p.Name
	if err := s.check(op); err != nil {
		return store.Lease{}, err
	}
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
	err := s.pool.QueryRow(ctx, `
INSERT INTO leader AS l (name, node_id, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET node_id = EXCLUDED.node_id, expires_at = EXCLUDED.expires_at
WHERE l.node_id = EXCLUDED.node_id OR l.expires_at < $4
RETURNING name, node_id, expires_at`, p.Name, p.NodeID, us(p.Now.Add(p.TTL)), us(p.Now)).
		Scan(&l.Name, &l.NodeID, &l.ExpiresAt)
	s.noteWrite(err)
	if errors.Is(err, pgx.ErrNoRows) {
		// Held by another node: report the current holder.
		err = s.pool.QueryRow(ctx, "SELECT name, node_id, expires_at FROM leader WHERE name = $1", p.Name).
			Scan(&l.Name, &l.NodeID, &l.ExpiresAt)
		if err == nil && l.NodeID == p.NodeID {
			// The upsert found another holder, yet the row names the caller
			// now: an earlier call of its own committed in between. That
			// expiry is not this call's Now+TTL, so do not report it as held.
			return store.Lease{}, fmt.Errorf("%s: the lease changed during the call: %w", op, store.ErrConflict)
		}
	}
	if err != nil {
		return store.Lease{}, translate(op, err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// ReleaseLeader gives up the named lease if NodeID holds it.
func (s *Store) ReleaseLeader(ctx context.Context, p store.LeaderParams) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("release leader lease: %w", err)
	}
	op := "release leader lease " + p.Name
	if err := s.check(op); err != nil {
		return err
	}
	if !store.ValidText(p.Name) || !store.ValidText(p.NodeID) {
		return nil // no lease is held under such a name (the server would refuse it as text)
	}
	_, err := s.pool.Exec(ctx, "DELETE FROM leader WHERE name = $1 AND node_id = $2", p.Name, p.NodeID)
	return translate(op, err)
}

// GetLeader returns the named lease as stored, or store.ErrNotFound.
func (s *Store) GetLeader(ctx context.Context, name string) (store.Lease, error) {
	if err := store.CheckContext(ctx); err != nil {
		return store.Lease{}, fmt.Errorf("get leader lease: %w", err)
	}
	op := "get leader lease " + name
	if err := s.check(op); err != nil {
		return store.Lease{}, err
	}
	if !store.ValidText(name) {
		// The server would refuse such a name as text; no lease has it.
		return store.Lease{}, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var l store.Lease
	err := s.pool.QueryRow(ctx, "SELECT name, node_id, expires_at FROM leader WHERE name = $1", name).
		Scan(&l.Name, &l.NodeID, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return store.Lease{}, translate(op, err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// HeartbeatNode upserts a node's registry row with LastSeen = now.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, now time.Time) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("heartbeat node: %w", err)
	}
	op := "heartbeat node " + n.ID
	if err := s.check(op); err != nil {
		return err
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
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckTime("start time", n.StartedAt); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO nodes (id, host, version, role, started_at, last_seen) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, version = EXCLUDED.version, role = EXCLUDED.role,
	started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen`,
		n.ID, n.Host, n.Version, n.Role, nullTime(n.StartedAt), us(now))
	return s.noted(translate(op, err))
}

// ListNodes lists nodes seen at or after since, ordered by id.
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
	rows, err := s.pool.Query(ctx, `SELECT id, host, version, role, started_at, last_seen
FROM nodes WHERE last_seen >= $1 ORDER BY id`, us(since))
	if err != nil {
		return nil, translate(op, err)
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		var n store.Node
		var started *time.Time
		if err := rows.Scan(&n.ID, &n.Host, &n.Version, &n.Role, &started, &n.LastSeen); err != nil {
			return nil, translate(op, err)
		}
		n.StartedAt = fromNull(started)
		n.LastSeen = n.LastSeen.UTC()
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(op, err)
	}
	return out, nil
}

// PruneNodes deletes the registry rows of nodes last seen before
// p.SeenBefore.
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
	tag, err := s.pool.Exec(ctx, "DELETE FROM nodes WHERE last_seen < $1", us(p.SeenBefore))
	if err != nil {
		return 0, translate(op, err)
	}
	return int(tag.RowsAffected()), nil
}
