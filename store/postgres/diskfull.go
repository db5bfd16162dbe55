package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retryq/retryq/store"
)

// A full disk. PostgreSQL refuses a write that would grow a table, an
// index or a file it needs with disk_full (53100), which the store returns
// as store.ErrDiskFull with store.ErrUnavailable (translate); reads go on
// working. So that Ping, which only reads, tells a node's readiness probe
// that writes fail, the store remembers the last write refused so (the
// inserts and outcomes of the group writer, keyed inserts, fetches,
// promotions, lease extensions, transitions, type and leader lease upserts
// and the node heartbeat) until an insert of tasks commits a row again
// (one that only found its idempotency keys taken took no room), as
// store/sqlite does. Other writes do not end it: a table that still has
// room (the node heartbeat's, written every few seconds) says nothing of
// the tasks table, and a node flipped back to ready at every heartbeat
// while its enqueues were refused. While it is set, Ping tries an insert
// itself and rolls it back (probeRoom): a node that is not ready is sent
// no enqueue that could end it. Deletes (retention, purges, pruning, the
// leader lease's release) neither set nor clear it.

// isDiskFull reports whether err is, or wraps, the server's disk_full.
func isDiskFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53100"
}

// noteWrite records how a write ended, for Ping: disk_full (53100,
// translated or not) marks a full disk; nil and other errors change
// nothing (see noteInsert). A failure costs one errors.As.
func (s *Store) noteWrite(err error) {
	switch {
	case err == nil:
	case isDiskFull(err):
		full := err
		if !errors.Is(err, store.ErrDiskFull) { // not yet translated
			full = fmt.Errorf("%w: %w: %w", store.ErrUnavailable, store.ErrDiskFull, err)
		}
		s.full.Store(&full)
	}
}

// noteInsert records how a write that inserted tasks ended, for Ping: nil
// (it committed) with at least one row inserted clears a full disk, at the
// cost of one atomic load; an insert that only found its idempotency keys
// taken took no room and changes nothing; an error is noteWrite's.
func (s *Store) noteInsert(rows int64, err error) {
	if err != nil {
		s.noteWrite(err)
	} else if rows > 0 && s.full.Load() != nil {
		s.full.Store(nil)
	}
}

// noted is noteWrite(err) returning err, for a write's last return.
func (s *Store) noted(err error) error {
	s.noteWrite(err)
	return err
}

// diskFull returns the error of the last write refused for a full disk
// while no insert has committed since, else nil.
func (s *Store) diskFull() error {
	if full := s.full.Load(); full != nil {
		return fmt.Errorf("ping: no insert has committed since a write failed: %w", *full)
	}
	return nil
}

// probeSQL inserts the probe's row, a task of a typical size, as an
// enqueue does (the table and its indexes take it); nothing when a row has
// its id.
const probeSQL = `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
VALUES ($1, $1, $2, 0, 0, 'pending', now(), now(), now()) ON CONFLICT DO NOTHING`

// probePayload is the payload of the probe's row.
var probePayload = []byte(`{"probe":"` + strings.Repeat("x", 1000) + `"}`)

// probeRoom tries, on c, whether an enqueue could commit now, while a full
// disk is marked: it inserts a task row in a transaction it rolls back.
// The server extends a table or index file when the row is placed, not at
// the commit, so a disk that cannot take the row refuses it with
// disk_full; one that takes it ends the mark. It runs only on Ping while
// the mark is set, never on the write path.
func (s *Store) probeRoom(ctx context.Context, c *pgxpool.Conn) error {
	const op = "ping: try an insert"
	tx, err := c.Begin(ctx)
	if err != nil {
		return translate(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // the probe's row must not stay
	tag, err := tx.Exec(ctx, probeSQL, pingProbeID, probePayload)
	s.noteInsert(tag.RowsAffected(), err)
	return translate(op, err)
}

// pingProbeID is the id of the task row Ping's probe inserts and rolls
// back (probeRoom).
const pingProbeID = "retryq\x01ping probe"
