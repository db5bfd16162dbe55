package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/store"
)

// Native errors become the store's shared sentinel errors here, at the
// boundary of every method.

// translate maps native errors to the store sentinels, wrapping as
// "op: sentinel: native". Errors already carrying a sentinel pass through
// with the op prefix.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if isSentinel(err) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	if errors.As(err, &ce) && !errors.As(err, &pe) {
		// A connection attempt that failed without the server's answer,
		// its ConnectTimeout run out included (a server that accepts but
		// never answers): the database is unavailable, whatever context
		// error the attempt wraps, which errors.Is still finds. A server
		// that answered (no such database, a password refused, too many
		// connections) is judged by its answer below.
		return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err.Error() == "closed pool" { // puddle.ErrClosedPool
		return fmt.Errorf("%s: %w: %w", op, store.ErrClosed, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "53100": // disk_full: a table or its WAL cannot grow
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrDiskFull, err)
		case pgErr.Code == "XX001", // data_corrupted: a damaged table page
			pgErr.Code == "XX002": // index_corrupted
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrCorrupt, err)
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now
			// Insufficient resources: too many connections, out of
			// memory, configuration limits (disk full is above).
			strings.HasPrefix(pgErr.Code, "53"),
			pgErr.Code == "58000", // system_error
			pgErr.Code == "58030", // io_error
			pgErr.Code == "40001", // serialization_failure: retry the whole operation
			pgErr.Code == "40P01", // deadlock_detected: likewise
			// Limits an operator may set on the database or role
			// (ALTER DATABASE ... SET): the statement or the session ends,
			// the call may be tried again.
			pgErr.Code == "57014", // query_canceled: statement_timeout, pg_cancel_backend
			pgErr.Code == "55P03", // lock_not_available: lock_timeout
			pgErr.Code == "25P03", // idle_in_transaction_session_timeout (FATAL)
			pgErr.Code == "57P05", // idle_session_timeout (FATAL)
			// A server that is (still or again) a read-only standby, as
			// during a failover, or set read-only for maintenance.
			pgErr.Code == "25006": // read_only_sql_transaction
			return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
		case pgErr.Code == "42P01", // undefined_table: dropped or renamed, or its schema dropped
			pgErr.Code == "42703": // undefined_column: dropped or renamed
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrSchemaBroken, err)
		case pgErr.Code == "23505": // unique_violation
			return fmt.Errorf("%s: %w: %w", op, store.ErrConflict, err)
		case strings.HasPrefix(pgErr.Code, "22"), // data exception (bad input)
			pgErr.Code == "23514": // check_violation (unknown state)
			return fmt.Errorf("%s: %w: %w", op, store.ErrInvalid, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if isConnError(err) {
		return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isSentinel(err error) bool {
	for _, s := range []error{store.ErrNotFound, store.ErrLeaseLost, store.ErrConflict,
		store.ErrSchemaTooNew, store.ErrForeignSchema, store.ErrClosed, store.ErrUnavailable, store.ErrInvalid} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// isConnError reports errors of the connection rather than of the statement.
func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &ce), errors.As(err, &oe), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "conn busy") ||
		strings.Contains(msg, "failed to connect") || strings.Contains(msg, "connection reset")
}
