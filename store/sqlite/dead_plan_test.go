package sqlite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestDeadListPlans: ListDead filtered by type, error code (or none) or
// reason reads a range of a partial index of dead tasks in id order, so a
// page costs the rows it returns: the walk of tasks_dead_id read every
// dead task when the filter matched few (112 ms for an error code that
// matches none among 50,000 dead tasks of 1M), and tasks_dead_group
// sorted all the dead tasks of a type (72 ms). DeadSummary keeps reading
// the covering tasks_dead_group whatever the filter (through tasks_dead_code
// it read a table row per task: 45 ms instead of 10 for 12,375 tasks).
func TestDeadListPlans(t *testing.T) {
	s := openTemp(t)
	// No ANALYZE, as in production (see TestQueryPlans).
	cases := []struct {
		f    store.DeadFilter
		want string
	}{
		{store.DeadFilter{}, "tasks_dead_id"},
		{store.DeadFilter{Type: "a"}, "tasks_dead_type (type=?"},
		{store.DeadFilter{ErrorCode: "c"}, "tasks_dead_code (<expr>=?"},
		{store.DeadFilter{NoErrorCode: true}, "tasks_dead_code (<expr>=?"},
		{store.DeadFilter{Reason: "r"}, "tasks_dead_reason (dead_reason=?"},
		{store.DeadFilter{Type: "a", ErrorCode: "c"}, "tasks_dead_"},
		{store.DeadFilter{Type: "a", Reason: "r", Since: time.Unix(1, 0)}, "tasks_dead_"},
	}
	for _, c := range cases {
		for _, cursor := range []string{"", "z"} {
			f := c.f
			f.Cursor, f.Limit = cursor, 100
			name := fmt.Sprintf("%+v", f)
			where, args := deadWhere(f)
			if cursor != "" {
				where += " AND id < ?"
				args = append(args, cursor)
			}
			q, args := walkPage(" WHERE "+where, args, f.Limit)
			plan := strings.Join(explain(t, s, `WITH `+q+` SELECT * FROM page`, args...), "\n")
			if !strings.Contains(plan, "INDEX "+c.want) {
				t.Errorf("%s: plan does not read %s:\n%s", name, c.want, plan)
			}
			if strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "tasks_dead_group") {
				t.Errorf("%s: sorts the matching tasks:\n%s", name, plan)
			}
		}
		where, args := deadWhere(c.f)
		plan := strings.Join(explain(t, s, deadSummaryQuery(where), append(args, 10)...), "\n")
		if !strings.Contains(plan, "COVERING INDEX tasks_dead_group") {
			t.Errorf("summary %+v: plan does not read the covering tasks_dead_group:\n%s", c.f, plan)
		}
	}
}

// TestDeadRoundKeysResumeAtTheLastKey: a redrive's or purge's round after
// the first reads tasks_finished from the last round's key, updated_at and
// id both, not from its updated_at: tasks that died in the same µs (one
// write killed them all) were read again by every round from the first of
// them, so a purge of 100,000 dead tasks sharing a death time read them
// 200 times over (36 s, against 21 s for the rounds of before 4e70bcb).
func TestDeadRoundKeysResumeAtTheLastKey(t *testing.T) {
	s := openTemp(t)
	for _, f := range []store.DeadFilter{{}, {Type: "a"}, {Reason: "r"}, {ErrorCode: "c"}, {Type: "a", Since: time.Unix(1, 0)},
		{Reason: "r", Since: time.Unix(1, 0), Before: time.Unix(9, 0)}} {
		q, args := deadKeysQuery(f, &deadKey{at: 5, id: "x"}, &deadKey{at: 7, id: "y"}, deadBatch, true)
		plan := strings.Join(explain(t, s, q, args...), "\n")
		if !strings.Contains(plan, "INDEX tasks_finished (state=? AND (updated_at,id)>(?,?)") {
			t.Errorf("%+v: the round's keys are not read from the last key on:\n%s", f, plan)
		}
		if strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%+v: the round's keys are sorted:\n%s", f, plan)
		}
	}
}

// TestDeadRoundKeysOfAFilterReadItsIndex: the keys of a round that does
// not walk tasks_finished (a filter matching few tasks, see deadRounds)
// are read through the filter's own index, not a scan of every task.
func TestDeadRoundKeysOfAFilterReadItsIndex(t *testing.T) {
	s := openTemp(t)
	for _, c := range []struct {
		f    store.DeadFilter
		want string
	}{
		{store.DeadFilter{Type: "a"}, "tasks_dead_type (type=?"},
		{store.DeadFilter{ErrorCode: "c", Since: time.Unix(1, 0)}, "tasks_dead_code (<expr>=?"},
		{store.DeadFilter{NoErrorCode: true}, "tasks_dead_code (<expr>=?"},
		{store.DeadFilter{Reason: "r", Before: time.Unix(9, 0)}, "tasks_dead_reason (dead_reason=?"},
		{store.DeadFilter{IDs: []string{"x", "y"}}, "(id=?)"},
	} {
		for _, after := range []*deadKey{nil, {at: 5, id: "x"}} {
			q, args := deadKeysQuery(c.f, after, &deadKey{at: 7, id: "y"}, deadBatch, false)
			plan := strings.Join(explain(t, s, q, args...), "\n")
			if !strings.Contains(plan, c.want) {
				t.Errorf("%+v: the round's keys are not read through %s:\n%s", c.f, c.want, plan)
			}
		}
	}
}
