package sqlite

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// TestListPlans: a listing by states that have partial indexes reads those
// indexes, and the primary key only for its bounded probe (LIMIT): on a
// table of finished tasks, the walk of the primary key down to the
// matching tasks read the whole table (167 ms for none pending among 100k
// succeeded tasks). A filter holding succeeded keeps the walk.
func TestListPlans(t *testing.T) {
	s := openTemp(t)
	// No ANALYZE, as in production (see TestQueryPlans).
	all := []store.State{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting,
		store.StateCancelled, store.StateDead}
	cases := []struct {
		states []store.State
		typ    string
		want   []string // indexes that must appear in the plan
	}{
		{[]store.State{store.StatePending}, "", []string{"tasks_fetch"}},
		{[]store.State{store.StatePending}, "a", []string{"tasks_fetch_type"}},
		{[]store.State{store.StateRunning}, "", []string{"tasks_lease"}},
		{[]store.State{store.StateScheduled}, "", []string{"tasks_due"}},
		{[]store.State{store.StateRetryWaiting}, "a", []string{"tasks_due"}},
		{[]store.State{store.StateScheduled, store.StateRetryWaiting}, "", []string{"tasks_due"}},
		{[]store.State{store.StateCancelled}, "", []string{"tasks_finished"}},
		{[]store.State{store.StateDead}, "", []string{"tasks_dead_id"}},
		{all, "", []string{"tasks_fetch", "tasks_lease", "tasks_due", "tasks_finished", "tasks_dead_id"}},
		{all, "a", []string{"tasks_fetch_type", "tasks_lease", "tasks_due", "tasks_finished"}},
	}
	for _, c := range cases {
		for _, cursor := range []string{"", "z"} {
			name := fmt.Sprintf("%v type=%q cursor=%q", c.states, c.typ, cursor)
			if !indexedStates(c.states) {
				t.Fatalf("%s: not read through indexes", name)
			}
			pageCTE, args := listPage(c.states, c.typ, cursor, 100)
			plan := explain(t, s, `WITH `+pageCTE+` SELECT * FROM page`, args...)
			all := strings.Join(plan, "\n")
			for _, line := range plan {
				if strings.HasPrefix(line, "SCAN tasks") && !strings.Contains(line, "INDEX") {
					t.Errorf("%s: full table scan:\n%s", name, all)
				}
				// The primary key serves the probe (id<?, or a scan
				// bounded by its LIMIT) and the lookups of the page (id=?).
				if strings.Contains(line, "sqlite_autoindex_tasks_1") && !strings.Contains(line, "(id=?)") &&
					!strings.Contains(line, "(id<?)") && line != "SCAN tasks USING INDEX sqlite_autoindex_tasks_1" {
					t.Errorf("%s: reads the primary key for the states:\n%s", name, all)
				}
			}
			for _, idx := range c.want {
				if !strings.Contains(all, "INDEX "+idx+" ") && !strings.HasSuffix(all, "INDEX "+idx) && !strings.Contains(all, "INDEX "+idx+"\n") {
					t.Errorf("%s: plan does not use %s:\n%s", name, idx, all)
				}
			}
			if testing.Verbose() {
				t.Logf("%s:\n%s", name, all)
			}
		}
	}
	for _, states := range [][]store.State{nil, {store.StateSucceeded}, {store.StatePending, store.StateSucceeded}} {
		if indexedStates(states) {
			t.Errorf("%v: read through the states' indexes, want the primary-key walk", states)
		}
	}
}

// explain returns the details of q's query plan.
func explain(t *testing.T, s *Store, q string, args ...any) []string {
	t.Helper()
	rows, err := s.w.Query(`EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, q)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestListIndexedPages: listings read through the states' indexes return
// what the primary-key walk returns, page by page, whether the matching
// tasks are dense among the newest (the probe fills the page), sparse (the
// indexes do) or both, and past the probe's bound (1024 rows for the
// smaller limits); the largest limit lists them all.
func TestListIndexedPages(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	states := []store.State{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting,
		store.StateSucceeded, store.StateCancelled, store.StateDead}
	rng := rand.New(rand.NewPCG(1, 2))
	// 2500 tasks: the oldest 1200 of mixed states, then 1000 almost all
	// succeeded, then 300 mostly pending.
	tx, err := s.w.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2500 {
		st := states[rng.IntN(len(states))]
		switch {
		case i >= 1200 && i < 2200 && rng.IntN(100) > 0:
			st = store.StateSucceeded
		case i >= 2200 && rng.IntN(4) > 0:
			st = store.StatePending
		}
		if _, err := tx.Exec(`INSERT INTO tasks (id, type, payload, state, run_at, created_at, updated_at)
			VALUES (?, ?, CAST(? AS BLOB), ?, 1, 1, 1)`, fmt.Sprintf("t%05d", i), fmt.Sprintf("type%d", rng.IntN(3)),
			`{"i":`+fmt.Sprint(i)+`}`, string(st)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	type row struct{ id, state, typ string }
	var table []row // newest first
	rows, err := s.r.Query(`SELECT id, state, type FROM tasks ORDER BY id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.state, &r.typ); err != nil {
			t.Fatal(err)
		}
		table = append(table, r)
	}
	rows.Close()
	filters := [][]store.State{{store.StatePending}, {store.StateDead},
		{store.StateScheduled, store.StateRetryWaiting}, {store.StateRunning, store.StateCancelled, store.StateDead},
		{store.StatePending, store.StateRunning, store.StateScheduled, store.StateRetryWaiting, store.StateCancelled, store.StateDead}}
	for _, f := range filters {
		for _, typ := range []string{"", "type1"} {
			for _, limit := range []int{25, 200, math.MaxInt} {
				var want []string
				for _, r := range table {
					if slices.Contains(f, store.State(r.state)) && (typ == "" || r.typ == typ) {
						want = append(want, r.id)
					}
				}
				storetest.CheckTaskPages(ctx, t, s, store.ListParams{States: f, Type: typ, Limit: limit}, want)
			}
		}
	}
}
