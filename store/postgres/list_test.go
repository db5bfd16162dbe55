package postgres

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// TestListPlans: on a table of 100k mostly succeeded tasks, with and
// without statistics (right after a bulk load, autovacuum off), and with
// custom and generic plans, a listing by states that have partial indexes,
// and a listing of dead tasks, read those indexes and the primary key only
// for the bounded probe (a dead-letter queue of 1M was sorted whole for a
// page, 300 ms); any
// other listing walks the primary key (no sequential or bitmap scan, which
// read every matching task to sort them: 757 ms for the newest succeeded
// tasks of 1M rows without statistics, 180-650 ms for the newest pending
// ones of a backlog, 140-200 ms for three live states of a type). No plan
// runs in parallel or is JIT-compiled.
func TestListPlans(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `ALTER TABLE tasks SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT format('t%s', lpad(x::text, 10, '0')), 'type' || (x % 5), '{}'::bytea, 0, 0,
	coalesce((ARRAY['pending', 'running', 'retry_waiting', 'scheduled', 'dead', 'cancelled'])[x % 333], 'succeeded'),
	now(), now(), now()
FROM generate_series(1, 100000) x`); err != nil { // ARRAY[0] and past [6] are NULL
		t.Fatal(err)
	}
	all := []store.State{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting,
		store.StateCancelled, store.StateDead}
	indexed := []struct {
		states []store.State
		want   []string
	}{
		{[]store.State{store.StatePending}, []string{"tasks_pending_type_idx"}},
		{[]store.State{store.StateRunning}, []string{"tasks_lease_idx"}},
		{[]store.State{store.StateScheduled, store.StateRetryWaiting}, []string{"tasks_due_idx"}},
		{[]store.State{store.StateCancelled}, []string{"tasks_finished_idx"}},
		{[]store.State{store.StateDead}, []string{"tasks_dead_"}}, // tasks_dead_idx, or without a type tasks_dead_id_idx
		{all, []string{"tasks_pending_type_idx", "tasks_lease_idx", "tasks_due_idx", "tasks_finished_idx", "tasks_dead_"}},
	}
	walks := [][]store.State{nil, {store.StateSucceeded}, {store.StatePending, store.StateSucceeded}}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for _, typ := range []string{"", "type3"} {
				for _, cursor := range []string{"", "t0000050000"} {
					at := fmt.Sprintf("analyzed=%v %s type=%q cursor=%q", analyzed, mode, typ, cursor)
					for _, c := range indexed {
						q, args := listPage(c.states, typ, cursor, 100)
						plan := explainPage(ctx, t, s, listSettings, mode, q, args)
						name := fmt.Sprintf("%v %s", c.states, at)
						checkPlan(t, name, plan)
						if n := strings.Count(plan, "Index Scan Backward using tasks_pkey"); n != 1 {
							t.Errorf("%s: the primary key is walked %d times, want once (the probe):\n%s", name, n, plan)
						}
						for _, idx := range c.want {
							if !strings.Contains(plan, " "+idx) {
								t.Errorf("%s: plan does not read %s:\n%s", name, idx, plan)
							}
						}
					}
					for _, f := range []store.DeadFilter{{Type: typ}, {Type: typ, ErrorCode: "x"}, {Type: typ, Since: t0},
						{Type: typ, NoErrorCode: true, Reason: "r"}} {
						where, args := deadWhere(f, nil)
						q, args := probePage(where, []string{where}, args, cursor, 100)
						plan := explainPage(ctx, t, s, deadListSettings, mode, q, args)
						name := fmt.Sprintf("dead type=%q code=%q no code=%v reason=%q since=%v %s", f.Type, f.ErrorCode, f.NoErrorCode, f.Reason, !f.Since.IsZero(), at)
						checkPlan(t, name, plan)
						if n := strings.Count(plan, "Index Scan Backward using tasks_pkey"); n != 1 {
							t.Errorf("%s: the primary key is walked %d times, want once (the probe):\n%s", name, n, plan)
						}
						if !strings.Contains(plan, " tasks_dead_") && !strings.Contains(plan, " tasks_finished_idx ") {
							t.Errorf("%s: plan reads neither an index of dead tasks nor tasks_finished_idx:\n%s", name, plan)
						}
					}
					for _, states := range walks {
						if indexedStates(states) {
							t.Fatalf("%v: read through the states' indexes, want the walk", states)
						}
						q, args := listWalk(states, typ, cursor, 100)
						plan := explainPage(ctx, t, s, walkPlanSettings, mode, q, args)
						name := fmt.Sprintf("walk %v %s", states, at)
						checkPlan(t, name, plan)
						if !strings.Contains(plan, "Index Scan Backward using tasks_pkey") || strings.Contains(plan, "Bitmap") {
							t.Errorf("%s: does not walk the primary key:\n%s", name, plan)
						}
					}
				}
			}
		}
	}
}

// checkPlan fails t when plan reads the tasks table whole, runs in
// parallel or is JIT-compiled.
func checkPlan(t *testing.T, name, plan string) {
	t.Helper()
	for _, bad := range []string{"Seq Scan on tasks", "Gather", "JIT"} {
		if strings.Contains(plan, bad) {
			t.Errorf("%s: plan has %s:\n%s", name, bad, plan)
		}
	}
}

// explainPage returns the plan of page's statement over pageCTE under
// settings and the plan_cache_mode mode, as the statement's prepared
// EXECUTE.
func explainPage(ctx context.Context, t *testing.T, s *Store, settings, mode, pageCTE string, args []any) string {
	t.Helper()
	args = append(args, int64(4<<20))
	return explainStatement(ctx, t, s, settings, mode, pageSQL(pageCTE, len(args)), args)
}

// explainStatement returns the plan of the statement q with arguments
// args under settings and the plan_cache_mode mode, as its prepared
// EXECUTE.
func explainStatement(ctx context.Context, t *testing.T, s *Store, settings, mode, q string, args []any) string {
	t.Helper()
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case int:
			lits[i] = strconv.Itoa(v)
		case int64:
			lits[i] = strconv.FormatInt(v, 10)
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case time.Time:
			lits[i] = "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
		case []string:
			lits[i] = "'{" + strings.Join(v, ",") + "}'"
		default:
			t.Fatalf("argument %T", a)
		}
	}
	var plan []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, settings); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "PREPARE listing AS "+q); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE listing("+strings.Join(lits, ", ")+")")
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DEALLOCATE listing")
		return err
	})
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, q)
	}
	return strings.Join(plan, "\n")
}

// TestListIndexedPages: listings read through the states' indexes, and
// dead-letter listings, return
// what the primary-key walk returns, page by page, whether the matching
// tasks are dense among the newest (the probe fills the page), sparse (the
// indexes do) or both, and past the probe's bound (1024 rows for the
// smaller limits); the largest limit lists them all.
func TestListIndexedPages(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	states := []store.State{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting,
		store.StateSucceeded, store.StateCancelled, store.StateDead}
	rng := rand.New(rand.NewPCG(1, 2))
	// 2500 tasks: the oldest 1200 of mixed states, then 1000 almost all
	// succeeded, then 300 mostly pending.
	var ids, sts, types []string
	for i := range 2500 {
		st := states[rng.IntN(len(states))]
		switch {
		case i >= 1200 && i < 2200 && rng.IntN(100) > 0:
			st = store.StateSucceeded
		case i >= 2200 && rng.IntN(4) > 0:
			st = store.StatePending
		}
		ids = append(ids, fmt.Sprintf("t%05d", i))
		sts = append(sts, string(st))
		types = append(types, fmt.Sprintf("type%d", rng.IntN(3)))
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT id, type, '{}'::bytea, 0, 0, state, now(), now(), now() FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, state, type)`,
		ids, sts, types); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"", "type1"} {
		for _, limit := range []int{25, math.MaxInt} {
			var want, got []string
			for i := len(ids) - 1; i >= 0; i-- {
				if sts[i] == string(store.StateDead) && (typ == "" || types[i] == typ) {
					want = append(want, ids[i])
				}
			}
			for f := (store.DeadFilter{Type: typ, NoErrorCode: true, Limit: limit}); ; {
				ts, next, err := s.ListDead(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range ts {
					got = append(got, task.ID)
				}
				if next == "" || len(got) > len(ids) {
					break
				}
				f.Cursor = next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("ListDead type %q limit %d: got %d tasks, want %d", typ, limit, len(got), len(want))
			}
		}
	}
	filters := [][]store.State{{store.StatePending}, {store.StateDead},
		{store.StateScheduled, store.StateRetryWaiting}, {store.StateRunning, store.StateCancelled, store.StateDead},
		{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting, store.StateCancelled, store.StateDead}}
	for _, f := range filters {
		for _, typ := range []string{"", "type1"} {
			for _, limit := range []int{25, 200, math.MaxInt} {
				var want []string
				for i := len(ids) - 1; i >= 0; i-- {
					if slices.Contains(f, store.State(sts[i])) && (typ == "" || types[i] == typ) {
						want = append(want, ids[i])
					}
				}
				storetest.CheckTaskPages(ctx, t, s, store.ListParams{States: f, Type: typ, Limit: limit}, want)
			}
		}
	}
}
