package store

import "errors"

// Sentinel errors shared by all backends. Backends wrap them with context
// ("get task t_123: %w"); callers test with errors.Is.
var (
	// ErrNotFound is returned when a task, type or other record does not exist.
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost is returned (per item) when an outcome or heartbeat names a
	// lease that is no longer current: the task is not running, it runs under
	// another lease, or the lease expired.
	ErrLeaseLost = errors.New("lease lost")
	// ErrConflict is returned when a requested transition is not allowed from
	// the task's current state (for example retrying a succeeded task). The
	// wrapping message names the current state.
	ErrConflict = errors.New("state conflict")
	// ErrSchemaTooNew is returned by Open/Migrate when the database schema is
	// newer than this binary knows.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrForeignSchema is returned by Open/Migrate/SchemaVersion when the
	// database's schema_migrations table was not written by retryq (another
	// application's migration tool uses the same name): retryq needs a
	// database, or a PostgreSQL schema, of its own.
	ErrForeignSchema = errors.New("schema_migrations is not retryq's: give retryq a database or schema of its own")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable wraps connection-level failures (database down, network
	// reset) so callers can back off and retry the whole operation.
	ErrUnavailable = errors.New("database unavailable")
	// ErrSchemaBroken is returned, always together with ErrUnavailable, when
	// a table or column retryq's schema has is missing: dropped or renamed
	// by someone else after the migrations ran (SQLite "no such table",
	// PostgreSQL undefined_table or undefined_column). Ping fails with it,
	// so the node is not ready until the schema is restored.
	ErrSchemaBroken = errors.New("database schema broken: a table or column retryq needs is missing")
	// ErrDiskFull is returned, always together with ErrUnavailable, by a
	// write the database could not make durable for lack of space: the
	// disk or file system is full, or a quota or the process's file size
	// limit is reached (SQLite: SQLITE_FULL, or an I/O error while a file
	// is at the file size limit or its file system has no space left;
	// PostgreSQL: disk_full, SQLSTATE 53100). Nothing of the failed call
	// was committed; it may be retried once space is freed.
	ErrDiskFull = errors.New("database storage is full")
	// ErrCorrupt is returned, always together with ErrUnavailable, when
	// the database's storage is damaged or is not a database at all
	// (SQLite: SQLITE_CORRUPT, SQLITE_NOTADB, and the error names the
	// file; PostgreSQL: data_corrupted or index_corrupted, SQLSTATE XX001
	// or XX002). On SQLite it does not pass by itself: Ping fails with it
	// from then on, so the node is not ready until the database is
	// restored (from a backup) and the server restarted. On PostgreSQL
	// only the statements that meet the damage fail (the server's log
	// names the table or index; REINDEX rebuilds an index), and the store
	// does not remember it.
	ErrCorrupt = errors.New("database corrupt")
	// ErrInvalid is returned for params that can never succeed (empty id,
	// non-positive limit, unknown state name).
	ErrInvalid = errors.New("invalid argument")
)

// ConflictError describes a refused transition. It matches ErrConflict with
// errors.Is.
type ConflictError struct {
	ID    string // task id
	State State  // the state the task is actually in
	Op    string // the refused operation, e.g. "retry", "cancel"
}

// Error returns "cannot OP task ID in state STATE".
func (e *ConflictError) Error() string {
	return "cannot " + e.Op + " task " + e.ID + " in state " + string(e.State)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }
