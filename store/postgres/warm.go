package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Warm-up.
//
// A new PostgreSQL connection is slow to serve its first statements: the
// server forks a backend, which then fills its catalog caches, and pgx
// prepares each statement on first use. When a node starts, its producers,
// workers and scheduler loops all ask for connections at once, so without a
// warm-up the first tasks wait behind tens of connection setups (on a busy
// 2-core machine the first 200 ms of a run saw enqueue-to-start latencies of
// up to 180 ms). Open therefore opens the connections the node will need
// and prepares the statements of the hot paths on each before it returns.

// DefaultWarmConns is how many connections Open opens and prepares when
// Config.MinConns does not ask for more (capped at MaxConns).
const DefaultWarmConns = 8

// warmValuesRows: the VALUES inserts of 1 to warmValuesRows rows, the group
// sizes that a few concurrent single enqueues produce, are prepared at
// warm-up; larger sizes are prepared on first use.
const warmValuesRows = 8

// hotStatements are prepared on every warmed connection: the statements
// every enqueue, fetch, heartbeat and outcome runs.
var hotStatements = append([]string{
	insertRowsSQL,
	insertKeyedSQL,
	fetchPlanSettings,
	fetchOneTypeSQL,
	fetchTypesSQL,
	outcomePlanSettings,
	recordOutcomesSQL,
	recordSuccessesSQL,
	recordOutcomeSQL,
	extendLeasesSQL,
	getTypeSQL,
}, insertValuesSQL[1:warmValuesRows+1]...)

// warmConns is how many connections Open warms for cfg.
func warmConns(cfg Config) int {
	return int(max(cfg.MinConns, min(cfg.MaxConns, DefaultWarmConns)))
}

// warm opens n pool connections at once and, unless prepare is false (a
// transaction-mode pooler cannot keep prepared statements), prepares the
// hot statements on each, then returns them to the pool. A connection the
// server refuses (too many clients, say) is left to the pool to open later,
// as long as one opened; a statement that fails to prepare is an error.
func (s *Store) warm(ctx context.Context, n int, prepare bool) error {
	conns := make([]*pgxpool.Conn, n)
	acquireErrs := make([]error, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.pool.Acquire(ctx)
			if err != nil {
				acquireErrs[i] = err
				return
			}
			conns[i] = c
			if !prepare {
				return
			}
			for _, sql := range hotStatements {
				// Named after its text, pgx then uses this statement for
				// every query with that text on this connection.
				if _, err := c.Conn().Prepare(ctx, sql, sql); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			c.Release()
			opened++
		}
	}
	if opened == 0 {
		return translate("warm connections", acquireErrs[0])
	}
	for _, err := range errs {
		if err != nil {
			return translate("warm connections", err)
		}
	}
	return nil
}
