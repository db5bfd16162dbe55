package postgres

import (
	"slices"
	"strconv"
	"strings"

	"github.com/retryq/retryq/store"
)

// stateTerms are, for each state a partial index covers, the term that
// selects its tasks (aliased t). Succeeded is missing: its tasks are most
// of the table, and the newest of them are dense, so the primary-key walk
// finds them at once.
var stateTerms = map[store.State]string{
	store.StatePending:      "t.state = 'pending'",       // tasks_pending_idx
	store.StateRunning:      "t.state = 'running'",       // tasks_lease_idx
	store.StateScheduled:    "t.state = 'scheduled'",     // tasks_due_idx
	store.StateRetryWaiting: "t.state = 'retry_waiting'", // tasks_due_idx
	store.StateCancelled:    "t.state = 'cancelled'",     // tasks_finished_idx
	store.StateDead:         "t.state = 'dead'",          // tasks_dead_idx
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
// indexedStates) and of type typ ("" = any), with its arguments. As on
// SQLite (see its listPage), it reads both ways, each bounded, in one
// statement: probe, the probeRows newest tasks below the cursor through
// the primary key, and hit, those that match, which is the page when it
// fills it or when probe read every task below the cursor; otherwise edge
// holds the oldest probed id, and for each state its index gives the
// limit+1 newest matching tasks below it. The page is the limit+1 newest
// of hit and those reads.
//
// The planner is cost-based and, right after a bulk load, without
// statistics: it would walk the primary key for the states too (a
// generic plan did, reading 65,000 rows per state for 20 tasks). Each
// state's read sorts under "POSIX" (byte order, as "C"), an order no index
// gives, so reading the state's partial index is its cheapest plan; and
// it runs only when edge has a row (a one-time filter).
func listPage(states []store.State, typ, cursor string, limit int) (string, []any) {
	args := []any{candidates(limit), probeRows(limit)} // $1, $2
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	args = append(args, names) // $3
	var b strings.Builder
	b.WriteString(`probe AS MATERIALIZED (SELECT t.id, t.state, t.type FROM tasks t`)
	if cursor != "" {
		args = append(args, cursor)
		b.WriteString(` WHERE t.id < $` + strconv.Itoa(len(args)))
	}
	b.WriteString(` ORDER BY t.id DESC LIMIT $2),
hit AS MATERIALIZED (SELECT id FROM probe WHERE state = ANY($3)`)
	typeTerm := ""
	if typ != "" {
		args = append(args, typ)
		typeTerm = " AND t.type = $" + strconv.Itoa(len(args))
		b.WriteString(` AND type = $` + strconv.Itoa(len(args)))
	}
	b.WriteString(` ORDER BY id DESC LIMIT $1),
edge AS MATERIALIZED (SELECT min(id) AS e FROM probe HAVING count(*) = $2 AND (SELECT count(*) FROM hit) < $1),
cand AS (SELECT id FROM hit`)
	both := slices.Contains(states, store.StateScheduled) && slices.Contains(states, store.StateRetryWaiting)
	dueRead := false
	for _, st := range states {
		term := stateTerms[st]
		if both && (st == store.StateScheduled || st == store.StateRetryWaiting) {
			if dueRead {
				continue // one read of tasks_due_idx serves both
			}
			dueRead = true
			term = "t.state IN ('scheduled', 'retry_waiting')"
		}
		b.WriteString(`
	UNION ALL (SELECT t.id FROM tasks t WHERE ` + term + typeTerm + ` AND (SELECT e FROM edge) IS NOT NULL
		AND t.id < (SELECT e FROM edge) ORDER BY t.id COLLATE "POSIX" DESC LIMIT $1)`)
	}
	b.WriteString(`),
page AS (SELECT t.id AS pid, coalesce(octet_length(t.payload), 0) AS size
	FROM (SELECT id FROM cand ORDER BY id DESC LIMIT $1) c JOIN tasks t ON t.id = c.id)`)
	return b.String(), args
}
