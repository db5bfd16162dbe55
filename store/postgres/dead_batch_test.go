package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestDeadBulkInBatches: a redrive or purge of every matching dead task
// runs in transactions of at most deadBatch tasks each, as on SQLite, so
// that a cancel or retry of a matching task, or another redrive or purge,
// waits for one batch, not for the whole dead-letter queue (1M tasks,
// 100,000 dead: a cancel of a dead task waited 3.5 s for a redrive and
// 4.3 s for a purge), and takes exactly the tasks that matched, oldest
// death first, within a Limit. A trigger records the transaction of each
// task the call changes.
func TestDeadBulkInBatches(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"redrive", "purge"} {
		for _, limit := range []int{0, 2*deadBatch + 7} {
			t.Run(fmt.Sprintf("%s limit=%d", op, limit), func(t *testing.T) {
				t.Parallel()
				s := openURL(t, pgtest.URL(t), nil)
				ctx := t.Context()
				n := 2*deadBatch + 10
				if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at,
	last_error_code, dead_reason)
SELECT format('t%s', lpad(x::text, 6, '0')), 'a', '{}'::bytea, 0, 0, 'dead', $2::timestamptz, $2::timestamptz, $2::timestamptz + make_interval(secs => (x * 7919) % $1),
	'c', 'max_attempts'
FROM generate_series(1, $1) x`, n, t0); err != nil {
					t.Fatal(err)
				}
				if _, err := s.pool.Exec(ctx, `CREATE TABLE changed (xid bigint NOT NULL);
CREATE FUNCTION record_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO changed VALUES (txid_current()); RETURN NULL; END $$;
CREATE TRIGGER record_changed AFTER UPDATE OR DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION record_changed()`); err != nil {
					t.Fatal(err)
				}
				f := store.DeadFilter{Type: "a", Limit: limit, Now: t0.Add(time.Hour)}
				var got int
				var err error
				if op == "redrive" {
					got, err = s.RedriveDead(ctx, f)
				} else {
					got, err = s.PurgeDead(ctx, f)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := n
				if limit > 0 {
					want = limit
				}
				if got != want {
					t.Errorf("%s took %d, want %d", op, got, want)
				}
				var txs, largest int
				if err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM changed GROUP BY xid) x`).Scan(&txs, &largest); err != nil {
					t.Fatal(err)
				}
				if txs < 3 || largest > deadBatch {
					t.Errorf("%s of %d tasks ran in %d transactions of up to %d tasks, want at least 3 of at most %d", op, got, txs, largest, deadBatch)
				}
				var left int
				var oldest time.Time
				if err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(min(updated_at), $1) FROM tasks WHERE state = 'dead'`, t0).Scan(&left, &oldest); err != nil {
					t.Fatal(err)
				}
				if left != n-want {
					t.Errorf("%d dead left, want %d", left, n-want)
				}
				if left > 0 && oldest.Before(t0.Add(time.Duration(want)*time.Second)) {
					t.Errorf("the oldest dead task left died at %v: not the oldest deaths were taken", oldest.Sub(t0))
				}
			})
		}
	}
}
