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
	store.StatePending:      "t.state = 'pending'",       // tasks_pending_type_idx
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
// indexedStates) and of type typ ("" = any), with its arguments: a
// probePage with one index read per state.
func listPage(states []store.State, typ, cursor string, limit int) (string, []any) {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	args := []any{names}
	match := "t.state = ANY($1)"
	typeTerm := ""
	if typ != "" {
		args = append(args, typ)
		typeTerm = " AND t.type = $2"
		match += typeTerm
	}
	var arms []string
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
		arms = append(arms, term+typeTerm)
	}
	return probePage(match, arms, args, cursor, limit)
}

// probePage returns the common table expression page(pid, size) of page
// for the tasks (aliased t) below cursor ("" = none) that match selects,
// with its arguments: args are those of match and arms, conditions that
// together select the same tasks as match, each served by an index.
//
// The tasks may be few among many others, where walking the primary key
// down would read the whole table to fill a page, or they may be most of
// the newest (a backlog of a million pending tasks, a dead-letter queue
// an outage filled), where sorting them all by id would take seconds. As
// on SQLite (see its listPage), it reads both ways, each bounded, in one
// statement: probe, the probeRows newest tasks below the cursor through
// the primary key, and hit, those that match, which is the page when it
// fills it or when probe read every task below the cursor; otherwise edge
// holds the oldest probed id, and each arm gives the limit+1 newest of its
// tasks below it. The page is the limit+1 newest of hit and those reads.
//
// The planner is cost-based and, right after a bulk load, without
// statistics: it would walk the primary key for the arms too (a generic
// plan did, reading 65,000 rows per state for 20 tasks). Each arm sorts
// under "POSIX" (byte order, as "C"), an order the primary key does not
// give, so reading its own index is its cheapest plan; and it runs only
// when edge has a row (a one-time filter). The partial indexes of dead
// tasks hold the id under "POSIX" (migration 6) and so give that order:
// an arm of dead tasks reads its page, not every matching task sorted;
// its bound on the id is compared under "POSIX" too, to be their index
// condition.
func probePage(match string, arms []string, args []any, cursor string, limit int) (string, []any) {
	args = append(args, candidates(limit), probeRows(limit))
	n1, k := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
	var b strings.Builder
	b.WriteString(`probe AS MATERIALIZED (SELECT t.id, ` + match + ` AS m FROM tasks t`)
	if cursor != "" {
		args = append(args, cursor)
		b.WriteString(` WHERE t.id < $` + strconv.Itoa(len(args)))
	}
	b.WriteString(` ORDER BY t.id DESC LIMIT ` + k + `),
hit AS MATERIALIZED (SELECT id FROM probe WHERE m ORDER BY id DESC LIMIT ` + n1 + `),
edge AS MATERIALIZED (SELECT min(id) AS e FROM probe HAVING count(*) = ` + k + ` AND (SELECT count(*) FROM hit) < ` + n1 + `),
cand AS (SELECT id FROM hit`)
	for _, arm := range arms {
		b.WriteString(`
	UNION ALL (SELECT t.id FROM tasks t WHERE ` + arm + ` AND (SELECT e FROM edge) IS NOT NULL
		AND t.id COLLATE "POSIX" < (SELECT e FROM edge) ORDER BY t.id COLLATE "POSIX" DESC LIMIT ` + n1 + `)`)
	}
	b.WriteString(`),
page AS (SELECT t.id AS pid, coalesce(octet_length(t.payload), 0) AS size
	FROM (SELECT id FROM cand ORDER BY id DESC LIMIT ` + n1 + `) c JOIN tasks t ON t.id = c.id)`)
	return b.String(), args
}
