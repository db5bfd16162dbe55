package postgres

import (
	"context"
	"fmt"
	"strconv"
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

// loadDeadPlanTable fills s's tasks with 100k mostly succeeded tasks, one
// in 20 dead, spread among them, of four types and codes, the deaths one
// second apart up to t0, with autovacuum off so that the table has no
// statistics until the test analyzes it.
func loadDeadPlanTable(ctx context.Context, t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.pool.Exec(ctx, `ALTER TABLE tasks SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at,
	last_error_code, dead_reason)
SELECT format('t%s', lpad(x::text, 10, '0')), 'type' || (x / 20 % 4), '{}'::bytea, 0, 0,
	CASE WHEN x % 20 = 0 THEN 'dead' ELSE 'succeeded' END, $1::timestamptz, $1::timestamptz,
	$1::timestamptz - make_interval(secs => 100000 - x),
	CASE WHEN x % 20 = 0 THEN 'c' || (x / 80 % 4) END, CASE WHEN x % 20 = 0 THEN 'max_attempts' ELSE '' END
FROM generate_series(1, 100000) x`, t0); err != nil {
		t.Fatal(err)
	}
}

// TestDeadRoundPlans: a redrive or purge of more than one round reads each
// round's keys walking tasks_finished_idx from the last round's, with and
// without statistics, whatever the filter, sorting nothing but the ids of
// one death time: the planner, expecting a few matching tasks, read every
// matching dead task through a dead tasks' index and sorted them for each
// round (a redrive of 21,429 dead tasks of a type among 1M tasks: 43
// rounds of 0.1-0.5 s, 18 s where one statement took 3.6 s). The round
// itself finds its tasks by id.
func TestDeadRoundPlans(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	loadDeadPlanTable(ctx, t, s)
	var ids []string
	if err := s.pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM tasks WHERE state = 'dead' AND type = 'type1'
	ORDER BY updated_at LIMIT $1) x`, deadBatch).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	filters := []store.DeadFilter{{}, {Type: "type1"}, {ErrorCode: "c1"}, {ErrorCode: "nomatch"}, {NoErrorCode: true},
		{Reason: "max_attempts"}, {Type: "type1", ErrorCode: "c1"}, {Since: t0.Add(-time.Hour)}}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for _, after := range []*deadKey{nil, {t0.Add(-50000 * time.Second), "t0000050000"}} {
				for _, f := range filters {
					q, args := deadKeysSQL(f, after, &deadKey{t0, "t0000090000"}, deadBatch)
					plan := explainStatement(ctx, t, s, deadWalkSettings, mode, q, args)
					name := fmt.Sprintf("%+v analyzed=%v %s after=%v", f, analyzed, mode, after)
					checkPlan(t, name, plan)
					if !strings.Contains(plan, "Index Scan using tasks_finished_idx") {
						t.Errorf("%s: plan does not walk tasks_finished_idx:\n%s", name, plan)
					}
					if strings.Contains(strings.ReplaceAll(plan, "Incremental Sort", ""), "Sort  (") || strings.Contains(plan, "Bitmap") {
						t.Errorf("%s: sorts the matching dead tasks:\n%s", name, plan)
					}
				}
				if after != nil {
					continue
				}
				for _, f := range filters {
					for _, op := range []string{"redrive", "purge"} {
						var q string
						var args []any
						if op == "redrive" {
							var where string
							where, args = deadWhere(f, []any{t0})
							args = append(args, ids)
							q = redriveDeadSQL(where, "$"+strconv.Itoa(len(args)), true)
						} else {
							var where string
							where, args = deadWhere(f, nil)
							args = append(args, ids)
							q = purgeDeadSQL(where, "$"+strconv.Itoa(len(args)))
						}
						plan := explainStatement(ctx, t, s, deadRoundSettings, mode, q, args)
						name := fmt.Sprintf("%s %+v analyzed=%v %s", op, f, analyzed, mode)
						checkPlan(t, name, plan)
						if !strings.Contains(plan, "tasks_pkey") || strings.Contains(plan, "Bitmap") || strings.Contains(plan, "tasks_dead_") {
							t.Errorf("%s: the round does not find its tasks by id:\n%s", name, plan)
						}
					}
				}
			}
		}
	}
}

// TestDeadSummarySincePlans: a summary of the tasks that died since a
// time reads them, and only them, from tasks_finished_idx, with and
// without statistics: with statistics the planner read every dead task
// through tasks_dead_id_idx (migration 6), whose ids it took for as
// ordered as the table, and dropped those that died before (1M tasks,
// 100,000 dead, 10,000 in the last day: 12 ms became 140-200 ms), and
// without, every dead task of the type filtered for.
func TestDeadSummarySincePlans(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	loadDeadPlanTable(ctx, t, s)
	since := t0.Add(-time.Hour)
	params := []store.SummaryParams{{Since: since}, {Since: since, Type: "type1"}, {Since: since, ErrorCode: "c1"},
		{Since: since, NoErrorCode: true}, {Since: since, Reason: "max_attempts"}, {Since: since, Limit: 3}}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for _, p := range params {
				settings, q, args := deadSummarySQL(p)
				if settings == "" {
					settings = "SELECT 1"
				}
				plan := explainStatement(ctx, t, s, settings, mode, q, args)
				name := fmt.Sprintf("%+v analyzed=%v %s", p, analyzed, mode)
				checkPlan(t, name, plan)
				if !strings.Contains(plan, "tasks_finished_idx") || strings.Contains(plan, "tasks_dead_") {
					t.Errorf("%s: plan does not read the deaths since from tasks_finished_idx:\n%s", name, plan)
				}
			}
		}
	}
}
