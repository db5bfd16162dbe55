package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestDeadBulkInBatches: a redrive or purge of every matching dead task
// runs in write transactions of at most deadBatch tasks each, so that the
// single writer is not held for the whole dead-letter queue (12,500 tasks
// of a 1M-task database held it, and every enqueue, for 8 s), and takes
// exactly the tasks that matched, oldest death first, within a Limit.
func TestDeadBulkInBatches(t *testing.T) {
	ctx := context.Background()
	for _, op := range []string{"redrive", "purge"} {
		for _, limit := range []int{0, 2*deadBatch + 7} {
			t.Run(fmt.Sprintf("%s limit=%d", op, limit), func(t *testing.T) {
				s := openTemp(t)
				n := 2*deadBatch + 10
				if _, err := s.w.Exec(`WITH RECURSIVE x(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM x WHERE i < ?)
					INSERT INTO tasks (id, type, state, run_at, created_at, updated_at, last_error_code, dead_reason)
					SELECT printf('t%06d', i), 'a', 'dead', 1, 1, 1000 + (i * 7919) % ?, 'c', 'max_attempts' FROM x`, n, n); err != nil {
					t.Fatal(err)
				}
				before := s.GroupStats()
				f := store.DeadFilter{Type: "a", Limit: limit, Now: time.UnixMicro(5000)}
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
				if tx := s.GroupStats().Groups - before.Groups; tx < 3 {
					t.Errorf("%s of %d tasks ran in %d write transactions, want at least 3 of at most %d tasks", op, got, tx, deadBatch)
				}
				var left, newest int64
				if err := s.r.QueryRow(`SELECT count(*), coalesce(min(updated_at), 0) FROM tasks WHERE state = 'dead'`).Scan(&left, &newest); err != nil {
					t.Fatal(err)
				}
				if left != int64(n-want) {
					t.Errorf("%d dead left, want %d", left, n-want)
				}
				if left > 0 && newest < 1000+int64(want) {
					t.Errorf("the oldest dead task left died at %d: not the oldest deaths were taken", newest)
				}
			})
		}
	}
}
