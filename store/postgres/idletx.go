package postgres

import (
	"context"
	"strconv"
	"time"
)

// IdleInTransactionTimeout bounds how long a session of the store may sit
// idle inside one of its explicit transactions (Stats, ListAttempts,
// Upgrade) before the server ends it. The store sends each statement of
// such a transaction right after the previous one answers, so only a
// client that is gone (its network path cut, its process stopped or
// frozen) reaches it; without it the server keeps that session, with its
// snapshot and locks, until it notices the dead peer, hours later with
// default keepalives. A tighter idle_in_transaction_session_timeout set on
// the server, database or role is left as it is.
const IdleInTransactionTimeout = time.Minute

// beginQuery returns the statement that starts the store's explicit
// transactions: BEGIN and a transaction-scoped (SET LOCAL, so it cannot
// leak through a transaction-mode pooler to another client) idle timeout,
// unless the session's own is already as tight. The session's setting is
// read once; should that fail, the timeout is set.
func (s *Store) beginQuery(ctx context.Context) string {
	s.beginOnce.Do(func() {
		limit := s.idleTxLimit
		if limit <= 0 {
			limit = IdleInTransactionTimeout
		}
		ms := max(limit.Milliseconds(), 1)
		var current int64 // milliseconds, 0 = none
		err := s.pool.QueryRow(ctx,
			"SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&current)
		if err == nil && current > 0 && current <= ms {
			s.begin = "BEGIN"
			return
		}
		s.begin = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = " + strconv.FormatInt(ms, 10)
	})
	return s.begin
}
