package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestFetchPlanHasNoSortSoNoJIT: under the fetch's plan settings
// (enable_sort off) the fetch statement, with its byte bound, walks the
// pending index and sorts nothing. A Sort node would be priced at
// disable_cost, and a plan that expensive passes jit_above_cost: every
// fetch would then be JIT-compiled, hundreds of milliseconds each.
func TestFetchPlanHasNoSortSoNoJIT(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("t", 200), Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, types := range [][]string{nil, {"email"}, {"email", "sms"}} {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, fetchPlanSettings); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+fetchSQL, 100, types, us(t0.Add(time.Minute)), "w", us(t0), "p", int64(4<<20))
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		_ = tx.Rollback(ctx)
		all := strings.Join(plan, "\n")
		if strings.Contains(all, "Sort") || strings.Contains(all, "cost=1000000") {
			t.Errorf("types %v: the fetch sorts or is priced at disable_cost:\n%s", types, all)
		}
		if !strings.Contains(all, "tasks_pending_idx") {
			t.Errorf("types %v: the fetch does not walk the pending index:\n%s", types, all)
		}
	}
}
