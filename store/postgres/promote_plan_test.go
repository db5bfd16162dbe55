package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
)

// TestPromotePlanReadsOnlyTheDueTasks: a promotion of a full batch (the
// scheduler's 1000) reads the due index and then the batch's rows by
// primary key, whatever the size of the table. The update used to join
// the batch to a sequential scan of the whole table, hashed (a table of
// 100k mostly finished tasks: 100k rows read and hashed per promotion,
// ten times the cost of the batch itself, and growing with retention).
func TestPromotePlanReadsOnlyTheDueTasks(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	s := openURL(t, dbURL, nil)
	ctx := t.Context()
	c := connect(t, dbURL)
	// 40k tasks, one in four scheduled, the others finished.
	if _, err := c.Exec(ctx, `INSERT INTO tasks (id, type, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT 'p' || lpad(g::text, 6, '0'), 'email', 0, 0, CASE WHEN g % 4 = 0 THEN 'scheduled' ELSE 'succeeded' END,
	$1::timestamptz + g * interval '1 second', $1, $1
FROM generate_series(1, 40000) g`, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{promoteSQL, promoteNotifySQL} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var all string
			func() {
				defer func() { _ = tx.Rollback(ctx) }()
				if _, err := tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode); err != nil {
					t.Fatal(err)
				}
				rows, err := tx.Query(ctx, "EXPLAIN "+sql, us(t0.Add(10*time.Hour)), 1000)
				if err != nil {
					t.Fatal(err)
				}
				all = planText(t, rows)
			}()
			if strings.Contains(all, "Seq Scan") || strings.Contains(all, "Hash") {
				t.Errorf("%s: the promotion scans or hashes the table:\n%s", mode, all)
			}
			if !strings.Contains(all, "tasks_due_idx") || !strings.Contains(all, "tasks_pkey") {
				t.Errorf("%s: the promotion reads neither the due index nor the primary key:\n%s", mode, all)
			}
		}
	}
}
