package sqlite

import (
	"slices"
	"strconv"
	"strings"

	"github.com/retryq/retryq/store"
)

// stateTerms are, for each state a partial index covers, the terms that
// select its tasks through that index: SQLite uses a partial index only
// when the query repeats the index's WHERE term literally. Succeeded is
// missing: its tasks are most of the table, and the newest of them are
// dense, so the primary-key walk finds them at once.
var stateTerms = map[store.State]string{
	store.StatePending:      "state = 'pending'",                                                   // tasks_fetch, tasks_fetch_type
	store.StateRunning:      "state = 'running'",                                                   // tasks_lease
	store.StateScheduled:    "state IN ('scheduled', 'retry_waiting') AND state = 'scheduled'",     // tasks_due
	store.StateRetryWaiting: "state IN ('scheduled', 'retry_waiting') AND state = 'retry_waiting'", // tasks_due
	store.StateCancelled:    "state IN ('succeeded', 'cancelled', 'dead') AND state = 'cancelled'", // tasks_finished
	store.StateDead:         "state = 'dead'",                                                      // tasks_dead_id, in id order
}

// indexedStates reports whether every state of a non-empty filter has a
// partial index (stateTerms).
func indexedStates(states []store.State) bool {
	for _, st := range states {
		if _, ok := stateTerms[st]; !ok {
			return false
		}
	}
	return len(states) > 0
}

// probeRows is how many of the newest tasks listPage reads through the
// primary key before it turns to the states' indexes, for a page of limit
// tasks: 8 per task, at least 1024 and at most 65536.
func probeRows(limit int) int {
	if limit >= 8192 {
		return 65536
	}
	return max(1024, 8*(limit+1))
}

// listPage returns the common table expression page(pid, size) of page
// for the tasks below cursor ("" = none) in the given states (distinct,
// indexedStates) and of type typ ("" = any), with its arguments. Those
// tasks may be few among many finished ones, where walking the primary
// key down would read the whole table to fill a page, or they may be a
// backlog (a million pending tasks), where sorting them all by id would
// take seconds. So it reads both ways, each bounded:
//
//   - probe: the probeRows newest tasks below the cursor, through the
//     primary key; hit: those that match. When hit fills the page
//     (limit+1 candidates), or probe read every task below the cursor,
//     that is the page.
//   - edge holds the oldest probed id otherwise (and is empty when hit
//     was enough, so that the reads below stop at once): for each state,
//     its index gives the limit+1 newest matching tasks below edge, sorted
//     by id (dead tasks come in id order from tasks_dead_id).
//
// The page is the limit+1 newest of hit and those reads. The index reads
// cost the rows of the states they read, however large the table.
func listPage(states []store.State, typ, cursor string, limit int) (string, []any) {
	// ?1 = limit+1, ?2 = probe size, ?3 = type, ?4 = cursor, then states.
	args := []any{candidates(limit), probeRows(limit), typ, cursor}
	var b strings.Builder
	b.WriteString(`probe(pid, st, ty) AS (SELECT id, state, type FROM tasks`)
	if cursor != "" {
		b.WriteString(` WHERE id < ?4`)
	}
	b.WriteString(` ORDER BY id DESC LIMIT ?2),
		hit(pid) AS (SELECT pid FROM probe WHERE st IN (`)
	for i, st := range states {
		if i > 0 {
			b.WriteString(", ")
		}
		args = append(args, string(st))
		b.WriteString("?" + strconv.Itoa(len(args)))
	}
	b.WriteString(`)`)
	typeTerm := ""
	if typ != "" {
		b.WriteString(` AND ty = ?3`)
		typeTerm = " AND type = ?3"
	}
	b.WriteString(` ORDER BY pid DESC LIMIT ?1),
		edge(e) AS (SELECT min(pid) FROM probe HAVING count(*) = ?2 AND (SELECT count(*) FROM hit) < ?1),
		cand(pid) AS (SELECT pid FROM hit`)
	both := false
	for _, st := range states {
		term := stateTerms[st]
		switch st {
		case store.StateScheduled, store.StateRetryWaiting:
			if both {
				continue // one read of tasks_due serves both
			}
			if slices.Contains(states, store.StateScheduled) && slices.Contains(states, store.StateRetryWaiting) {
				both = true
				term = "state IN ('scheduled', 'retry_waiting')"
			}
		}
		if st == store.StateDead && typ == "" {
			// tasks_dead_id is in id order: a range read, which a NULL
			// bound (no edge row) ends at once.
			b.WriteString(`
			UNION ALL SELECT * FROM (SELECT id FROM tasks WHERE ` + term + typeTerm +
				` AND id < (SELECT e FROM edge) ORDER BY id DESC LIMIT ?1)`)
			continue
		}
		// CROSS JOIN keeps edge outside: no edge row, no index read. The
		// unary + keeps SQLite off the primary key, whose walk in id order
		// it would otherwise prefer to a sort (dead tasks of a type: the
		// planner's choice between tasks_dead_id and tasks_dead_group).
		idTerm := "+id < e"
		if st == store.StateDead {
			idTerm = "id < e"
		}
		b.WriteString(`
			UNION ALL SELECT * FROM (SELECT id FROM edge CROSS JOIN tasks WHERE ` + term + typeTerm +
			` AND ` + idTerm + ` ORDER BY +id DESC LIMIT ?1)`)
	}
	b.WriteString(`),
		page(pid, size) AS (SELECT id, coalesce(length(payload), 0)
			FROM (SELECT pid FROM cand ORDER BY pid DESC LIMIT ?1) JOIN tasks ON id = pid)`)
	return b.String(), args
}
