package multinode

// The drain of the two randomized model tests: after the chaos the engines
// run on, untouched, until every task has finished.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store/postgres"
)

const (
	// mnDrainStall is how long the drain may see no task finish and no
	// attempt of an open task start before it fails. The drain's length
	// is no bound: it is set by the pull workers' throughput (four loops
	// leasing one task at a time, a few round trips each, the heartbeated
	// ones over 300 ms), which a loaded machine cuts tenfold, and tasks
	// that failed once wait behind every fresh one (their priority sank).
	// The longest quiet of a working cluster is far shorter: a leader
	// takeover (mnTakeoverWait), a lease running out, a slow handler.
	mnDrainStall = 20 * time.Second
	// mnDrainMax bounds the whole drain, so that tasks that keep moving
	// without finishing (released and leased again forever) fail too.
	mnDrainMax = 3 * time.Minute
)

// openStates are the states of a task that has not finished.
const openStates = `('scheduled', 'pending', 'running', 'retry_waiting')`

// drainProgress is what the drain watches: the open tasks and the sum of
// their attempt numbers. It changes whenever a task finishes or an
// attempt of an open task starts; a task left pending, running or waiting
// for good leaves it unchanged once the others are done.
type drainProgress struct {
	open, attempts int64
}

func readDrainProgress(ctx context.Context, admin *postgres.Store) (drainProgress, error) {
	var p drainProgress
	err := admin.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(attempt), 0) FROM tasks WHERE state IN `+openStates).
		Scan(&p.open, &p.attempts)
	return p, err
}

// drain waits until every task has finished, watching through the test's
// own pool. It fails the test when the open tasks make no progress for
// mnDrainStall, or are still open after mnDrainMax, with what is open and
// since when.
func drain(t *testing.T, admin *postgres.Store) {
	t.Helper()
	start := time.Now()
	var last drainProgress
	moved := start
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := readDrainProgress(ctx, admin)
		cancel()
		if err != nil {
			t.Fatalf("drain: read progress: %v", err)
		}
		if p.open == 0 {
			return
		}
		if p != last {
			last, moved = p, time.Now()
		}
		if time.Since(moved) > mnDrainStall {
			t.Fatalf("drain: %d tasks unfinished and none moved for %s (%s into the drain): %s",
				p.open, mnDrainStall, time.Since(start).Round(time.Millisecond), openReport(admin))
		}
		if time.Since(start) > mnDrainMax {
			t.Fatalf("drain: %d tasks unfinished after %s: %s", p.open, mnDrainMax, openReport(admin))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openReport describes the open tasks: how many of each type, state and
// attempt, and the five updated longest ago.
func openReport(admin *postgres.Store) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	rows, err := admin.Pool().Query(ctx, `SELECT type, state, attempt, count(*) FROM tasks WHERE state IN `+openStates+
		` GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	if err != nil {
		return fmt.Sprintf("(read open tasks: %v)", err)
	}
	for rows.Next() {
		var typ, state string
		var attempt, n int
		if err := rows.Scan(&typ, &state, &attempt, &n); err != nil {
			rows.Close()
			return fmt.Sprintf("(read open tasks: %v)", err)
		}
		fmt.Fprintf(&b, "%d %s %s attempt %d; ", n, typ, state, attempt)
	}
	rows.Close()
	rows, err = admin.Pool().Query(ctx, `SELECT id, type, state, attempt, effective_prio,
		(extract(epoch FROM now() - run_at) * 1000)::bigint, (extract(epoch FROM now() - updated_at) * 1000)::bigint
		FROM tasks WHERE state IN `+openStates+` ORDER BY updated_at, id LIMIT 5`)
	if err != nil {
		return b.String() + fmt.Sprintf("(read open tasks: %v)", err)
	}
	defer rows.Close()
	b.WriteString("e.g.")
	for rows.Next() {
		var id, typ, state string
		var attempt, prio int
		var dueMS, idleMS int64
		if err := rows.Scan(&id, &typ, &state, &attempt, &prio, &dueMS, &idleMS); err != nil {
			return b.String() + fmt.Sprintf(" (read open tasks: %v)", err)
		}
		fmt.Fprintf(&b, " %s (%s) %s attempt %d priority %d, due %s ago, unchanged for %s;", id, typ, state, attempt, prio,
			time.Duration(dueMS)*time.Millisecond, time.Duration(idleMS)*time.Millisecond)
	}
	return b.String()
}
