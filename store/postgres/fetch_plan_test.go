package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// fetchArgs are the parameters of a fetch statement of types for tests.
func fetchArgs(types []string) []any {
	return []any{100, types, us(t0.Add(time.Minute)), "w", us(t0), "p", int64(4 << 20)}
}

// explainFetch returns the plan of the fetch of types, in a transaction
// that it rolls back, with the given EXPLAIN options.
func explainFetch(ctx context.Context, t *testing.T, s *Store, types []string, options string) string {
	t.Helper()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, fetchPlanSettings); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN ("+options+") "+fetchStatement(types), fetchArgs(types)...)
	if err != nil {
		t.Fatal(err)
	}
	return planText(t, rows)
}

// planText reads the lines of an EXPLAIN's answer and closes rows.
func planText(t *testing.T, rows pgx.Rows) string {
	t.Helper()
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestFetchPlanReadsTheTypeIndexSoNoJIT: under the fetch's plan settings,
// with and without statistics, the fetch statement with its byte bound
// reads each type's range of tasks_pending_type_idx (without a type filter
// too, after finding the types in it), and no plan is priced at
// disable_cost: a plan that expensive passes jit_above_cost, and every fetch
// would then be JIT-compiled, hundreds of milliseconds each.
func TestFetchPlanReadsTheTypeIndexSoNoJIT(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks := newTasks("t", 200)
	for i := range tasks {
		tasks[i].Type = []string{"email", "sms", "push"}[i%3]
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, types := range [][]string{nil, {"email"}, {"email", "sms"}} {
			plan := explainFetch(ctx, t, s, types, "COSTS")
			if strings.Contains(plan, "cost=1000000") {
				t.Errorf("analyzed %v, types %v: the fetch is priced at disable_cost:\n%s", analyzed, types, plan)
			}
			if !strings.Contains(plan, "tasks_pending_type_idx") || !strings.Contains(plan, "Index Cond: (type = ") ||
				strings.Contains(plan, "Filter: ((state = 'pending'::text) AND (type") {
				t.Errorf("analyzed %v, types %v: the fetch does not read each type's range of tasks_pending_type_idx:\n%s", analyzed, types, plan)
			}
		}
	}
}

// TestTypedFetchReadsOnlyItsTypes: a fetch of some types reads those types'
// pending tasks only, however many pending tasks of other types wait ahead
// of them in fetch order. It walked one index in fetch order filtering by
// type: behind a backlog of 200,000 tasks of another type, 165 ms a fetch.
func TestTypedFetchReadsOnlyItsTypes(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A backlog of 20,000 tasks, due and of higher priority than the 10
	// tasks of the types fetched.
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT format('b%s', lpad(x::text, 10, '0')), 'backlog' || (x % 3), '{}'::bytea, 5, 5, 'pending', $1, $1, $1
FROM generate_series(1, 20000) x`, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	tasks := append(newTasks("live", 6), newTasks("other", 4)...)
	for i := range tasks {
		tasks[i].Type = strings.TrimRight(tasks[i].ID, "0123456789")
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
				t.Fatal(err)
			}
		}
		for _, types := range [][]string{{"live"}, {"live", "other"}, {"absent"}, {"absent", "live"}} {
			out := explainFetch(ctx, t, s, types, "ANALYZE, FORMAT JSON")
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("EXPLAIN: %v\n%s", err, out)
			}
			if read := plans[0].Plan.rowsRead(); read > 50 {
				t.Errorf("analyzed %v, types %v: the fetch read %d rows behind a backlog of other types", analyzed, types, read)
			}
		}
	}
	got, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"other", "live"}, Limit: 100, WorkerID: "w",
		LeaseDuration: time.Minute, Now: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("fetched %d tasks of live and other, want 10", len(got))
	}
	for _, task := range got {
		if task.Type != "live" && task.Type != "other" {
			t.Errorf("fetched a task of type %q", task.Type)
		}
	}
}

// planNode is a node of an EXPLAIN (ANALYZE, FORMAT JSON) plan.
type planNode struct {
	NodeType       string     `json:"Node Type"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedByIndex float64    `json:"Rows Removed by Index Recheck"`
	RemovedByFilt  float64    `json:"Rows Removed by Filter"`
	Plans          []planNode `json:"Plans"`
}

// rowsRead is the rows the plan's scans of tasks produced or removed by a
// filter, over all loops.
func (n planNode) rowsRead() int {
	total := 0.0
	if strings.Contains(n.NodeType, "Scan") && n.NodeType != "CTE Scan" && n.NodeType != "Function Scan" && n.NodeType != "Subquery Scan" {
		total += (n.ActualRows + n.RemovedByFilt + n.RemovedByIndex) * max(n.ActualLoops, 1)
	}
	for _, c := range n.Plans {
		total += float64(c.rowsRead())
	}
	return int(total)
}

// TestFetchOfManyTypesIsNeverJITCompiled: a fetch of many types with a
// large limit, over a table with statistics and a backlog in each type, is
// priced at the sum of one index range per type (256 types of 1000 rows:
// over 180,000) and was JIT-compiled on every execution of a custom plan
// (jit_above_cost is 100,000), hundreds of milliseconds a fetch. The fetch's
// plan settings turn JIT off, as the operators' listings do.
func TestFetchOfManyTypesIsNeverJITCompiled(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, type, payload, priority, effective_prio, state, run_at, created_at, updated_at)
SELECT format('b%s', lpad(x::text, 10, '0')), format('ty%s', x % 256), '{}'::bytea, x % 7, x % 7, 'pending', $1, $1, $1
FROM generate_series(1, 50000) x`, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	types := make([]string, store.MaxFetchTypes)
	for i := range types {
		types[i] = fmt.Sprint("ty", i)
	}
	for _, c := range []struct {
		types []string
		mode  string
	}{{types, "force_custom_plan"}, {nil, "force_custom_plan"}, {types, "force_generic_plan"}, {nil, "force_generic_plan"}} {
		name := fmt.Sprint("many_types_fetch_", len(c.types), "_", c.mode) // prepared for the session
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan string
		func() {
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, fetchPlanSettings); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+c.mode); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+fetchStatement(c.types)); err != nil {
				t.Fatal(err)
			}
			// EXECUTE takes no bind parameters: the plan of a prepared
			// statement is chosen from its arguments as literals.
			var arg string
			if err := tx.QueryRow(ctx, "SELECT quote_nullable($1::text[])", c.types).Scan(&arg); err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE) EXECUTE %s(1000, %s, '2030-01-02 03:05:05Z', 'w', '2030-01-02 03:04:05Z', 'p', 4194304)`, name, arg))
			if err != nil {
				t.Fatal(err)
			}
			plan = planText(t, rows)
		}()
		if strings.Contains(plan, "JIT:") {
			t.Errorf("%d types, %s: the fetch is JIT-compiled:\n%s", len(c.types), c.mode, plan)
		}
	}
}

// TestFetchLocksOnlyWhatItLeases: a fetch of several types (or of any
// type) locks the rows it leases and no more, so a concurrent fetch skips
// only those. Locking Limit rows per type and merging after locked 20 × 10
// rows here to lease 10, each lock a WAL record, and a concurrent fetch of
// one of those types found them all locked and came back empty.
func TestFetchLocksOnlyWhatItLeases(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const types, each, limit = 20, 50, 10
	var names []string
	var tasks []store.NewTask
	for i := range types {
		name := fmt.Sprintf("kind%02d", i)
		names = append(names, name)
		for j := range each {
			tasks = append(tasks, store.NewTask{ID: fmt.Sprintf("%s-%03d", name, j), Type: name, Payload: json.RawMessage(`{}`)})
		}
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, fetched := range [][]string{names, nil} {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, fetchPlanSettings); err != nil {
			t.Fatal(err)
		}
		args := fetchArgs(fetched)
		args[0] = limit
		rows, err := tx.Query(ctx, fetchStatement(fetched), args...)
		if err != nil {
			t.Fatal(err)
		}
		leased := 0
		for rows.Next() {
			leased++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		// Another session counts the pending rows it could lock while the
		// fetch's transaction holds its locks.
		var free int
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM tasks WHERE state = 'pending'
			FOR UPDATE SKIP LOCKED) AS f`).Scan(&free)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if leased != limit || free != types*each-limit {
			t.Errorf("types %v: the fetch leased %d tasks and left %d of %d pending tasks lockable, want %d and %d",
				fetched != nil, leased, free, types*each, limit, types*each-limit)
		}
	}
}

// TestFetchGoesPastRowsOthersHold: when another transaction holds the rows
// a fetch of several types would take first (in the test, the higher
// priority type's), the fetch leases the next ones of its types instead of
// nothing. (Counting each type's share from an unlocked first look and
// locking only that many of each leased nothing here: every share fell on
// the held rows.)
func TestFetchGoesPastRowsOthersHold(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tasks []store.NewTask
	for i := range 10 {
		tasks = append(tasks, store.NewTask{ID: fmt.Sprintf("hi-%02d", i), Type: "hi", Priority: 9, Payload: json.RawMessage(`{}`)})
	}
	for i := range 30 {
		tasks = append(tasks, store.NewTask{ID: fmt.Sprintf("lo-%02d", i), Type: "lo", Payload: json.RawMessage(`{}`)})
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	holder, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT id FROM tasks WHERE type = 'hi' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	for _, types := range [][]string{{"hi", "lo"}, nil} {
		got, err := s.FetchTasks(ctx, store.FetchParams{Types: types, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 10 {
			t.Fatalf("types %v: leased %d tasks with 10 of hi held by another transaction and lo pending, want 10", types, len(got))
		}
		for _, task := range got {
			if task.Type != "lo" {
				t.Errorf("types %v: leased %s, held by another transaction", types, task.ID)
			}
		}
	}
}
