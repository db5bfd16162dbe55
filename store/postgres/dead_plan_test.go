package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestDeadListPlans: on a table of 100k mostly succeeded tasks whose dead
// ones are spread among them, with and without statistics and with custom
// and generic plans, ListDead without a filter or filtered by type, error
// code (or none) or reason reads a partial index of dead tasks in id order
// below the probe's edge (the filter's own, unless statistics show its value
// is common), sorting nothing: the index read sorted every
// matching dead task for a page (1M tasks, 50,000 dead: 74-185 ms
// unfiltered, 100-150 ms for a code matching none).
func TestDeadListPlans(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `ALTER TABLE tasks SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at,
	last_error_code, dead_reason)
SELECT format('t%s', lpad(x::text, 10, '0')), 'type' || (x / 20 % 4), '{}'::bytea, 0, 0,
	CASE WHEN x % 20 = 0 THEN 'dead' ELSE 'succeeded' END, now(), now(), now(),
	CASE WHEN x % 20 = 0 THEN 'c' || (x / 80 % 4) END, CASE WHEN x % 20 = 0 THEN 'max_attempts' ELSE '' END
FROM generate_series(1, 100000) x`); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		f    store.DeadFilter
		want string
	}{
		{store.DeadFilter{}, "tasks_dead_id_idx"},
		{store.DeadFilter{Type: "type1"}, "tasks_dead_idx"},
		{store.DeadFilter{ErrorCode: "nomatch"}, "tasks_dead_code_idx"},
		{store.DeadFilter{NoErrorCode: true}, "tasks_dead_code_idx"},
		{store.DeadFilter{Reason: "permanent"}, "tasks_dead_reason_idx"},
		{store.DeadFilter{Type: "type1", ErrorCode: "c1"}, "tasks_dead_"},
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for _, cursor := range []string{"", "t0000050000"} {
				for _, c := range cases {
					where, args := deadWhere(c.f, nil)
					q, args := probePage(where, []string{where}, args, cursor, 100)
					plan := explainPage(ctx, t, s, deadListSettings, mode, q, args)
					name := fmt.Sprintf("%+v analyzed=%v %s cursor=%q", c.f, analyzed, mode, cursor)
					checkPlan(t, name, plan)
					if n := strings.Count(plan, "Index Scan Backward using tasks_pkey"); n != 1 {
						t.Errorf("%s: the primary key is walked %d times, want once (the probe):\n%s", name, n, plan)
					}
					// Where statistics show a filter's value is common, reading
					// tasks_dead_id_idx and filtering is as good (and its choice).
					want := c.want
					if analyzed && c.f.ErrorCode != "nomatch" {
						want = "tasks_dead_"
					}
					if !strings.Contains(plan, "Scan Backward using "+want) { // an Index or Index Only Scan
						t.Errorf("%s: plan does not read %s in id order:\n%s", name, want, plan)
					}
					if strings.Contains(plan, `Sort Key: t_2.id COLLATE "POSIX"`) || strings.Contains(plan, "Bitmap") {
						t.Errorf("%s: sorts the matching dead tasks:\n%s", name, plan)
					}
				}
			}
		}
	}
}
