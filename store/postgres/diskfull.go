package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/store"
)

// A full disk. PostgreSQL refuses a write that would grow a table, an
// index or a file it needs with disk_full (53100), which the store returns
// as store.ErrDiskFull with store.ErrUnavailable (translate); reads go on
// working. So that Ping, which only reads, tells a node's readiness probe
// that writes fail, the store remembers the last write refused so until a
// write commits again (as store/sqlite does): the inserts and outcomes of
// the group writer, keyed inserts, fetches and promotions that leased or
// moved tasks, lease extensions, transitions, type and leader lease
// upserts and the node heartbeat, which every node writes every few
// seconds, so a node is ready again soon after space is freed. Deletes
// (retention, purges, pruning, the leader lease's release) neither set nor
// clear it: they need no room to commit.

// isDiskFull reports whether err is, or wraps, the server's disk_full.
func isDiskFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53100"
}

// noteWrite records how a write ended, for Ping: nil (the write
// committed) clears a full disk, disk_full (53100, translated or not)
// marks it, other errors change nothing. A commit costs one atomic load, a
// failure one errors.As.
func (s *Store) noteWrite(err error) {
	switch {
	case err == nil:
		if s.full.Load() != nil {
			s.full.Store(nil)
		}
	case isDiskFull(err):
		full := err
		if !errors.Is(err, store.ErrDiskFull) { // not yet translated
			full = fmt.Errorf("%w: %w: %w", store.ErrUnavailable, store.ErrDiskFull, err)
		}
		s.full.Store(&full)
	}
}

// noted is noteWrite(err) returning err, for a write's last return.
func (s *Store) noted(err error) error {
	s.noteWrite(err)
	return err
}

// diskFull returns the error of the last write refused for a full disk
// while no write has committed since, else nil.
func (s *Store) diskFull() error {
	if full := s.full.Load(); full != nil {
		return fmt.Errorf("ping: no write has committed since one failed: %w", *full)
	}
	return nil
}
