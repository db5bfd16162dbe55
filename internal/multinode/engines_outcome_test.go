package multinode

// What the model tests need to tell a finished attempt whose outcome
// missed its lease (at-least-once: the reaper retries it) or was dropped
// (the lease given back, the attempt not counted) from a handler that ran
// past its lease or an outcome lost silently: the outcomes the engines
// said they could not record; and, for TestEnginesRestartedAtRandom, the
// lease expiry of every reaped attempt as the store held it when the
// reaper took it.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/retryq/retryq/store/postgres"
)

// Engine log messages of an in-process outcome that did not commit: the
// commit failed (timed out, the database away) or the store refused it
// (the lease was gone by the commit's time); or the worker dropped it
// because it found the lease lost (the watchdog or a heartbeat cancelled
// the handler's context, or the task was leased again here) only after
// the handler had returned, with its context live, and before the worker
// concluded the attempt. The worker cannot tell a failure the handler
// returned on its own from one the cancellation caused, so it takes it
// for the cancellation's and leaves the task to the give-back or the
// reaper; on a starved process that gap can outlast what was left of the
// lease. The model's runs see the context as the handler returned.
const (
	msgOutcomeFailed     = "record outcome failed"
	msgOutcomeRefused    = "outcome refused: lease lost"
	msgStoppedLeaseLost  = "handler stopped: lease lost"
	msgReturnedLeaseLost = "handler returned after its lease was lost; outcome dropped"
	// msgStoppedAtShutdown: the shutdown grace ended after the handler
	// returned and before the worker concluded; the worker took the
	// failure for the stop's and gave the lease back.
	msgStoppedAtShutdown = "handler stopped at shutdown; releasing its lease"
)

// outcomeKey names one attempt's outcome as a node logged it.
type outcomeKey struct {
	node, task string
	attempt    int
}

// envEngineLog names a file for the model tests' engine logs (info and
// above).
const envEngineLog = "RETRYQ_MULTINODE_LOG"

// lostOutcome is one line of a node about an outcome it did not record.
type lostOutcome struct {
	msg  string
	at   time.Time
	used bool // taken by a run as its node's word (modelBook.loggedLost)
}

// outcomeLog is the engines' slog.Handler: it notes in the model every
// outcome a node logged as not recorded, and passes records on to next
// (the RETRYQ_MULTINODE_LOG file, or nothing).
type outcomeLog struct {
	next slog.Handler
	m    *modelBook
	node string // from the engine's Logger.With("node", ...)
}

// engineLogger returns the logger of a model test's engines, each to be
// named by With("node", ...): it notes in b what outcomeLog notes, and
// writes the records of level Info and up to the file RETRYQ_MULTINODE_LOG
// names, if set (closed when the test ends).
func engineLogger(t *testing.T, b *modelBook) *slog.Logger {
	t.Helper()
	logTo := slog.DiscardHandler
	if path := os.Getenv(envEngineLog); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		logTo = slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	return slog.New(outcomeLog{next: logTo, m: b})
}

func (h outcomeLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h outcomeLog) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case msgOutcomeFailed, msgOutcomeRefused, msgStoppedLeaseLost, msgReturnedLeaseLost, msgStoppedAtShutdown:
		k := outcomeKey{node: h.node, attempt: -1}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "task_id":
				k.task = a.Value.String()
			case "attempt":
				if n, err := strconv.Atoi(a.Value.String()); err == nil {
					k.attempt = n
				}
			}
			return true
		})
		h.m.noteOutcomeLost(k, r.Message, r.Time)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h outcomeLog) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "node" {
			h.node = a.Value.String()
		}
	}
	h.next = h.next.WithAttrs(as)
	return h
}

func (h outcomeLog) WithGroup(name string) slog.Handler {
	h.next = h.next.WithGroup(name)
	return h
}

// noteOutcomeLost records that k's outcome was logged as not recorded,
// with msg, at at.
func (b *modelBook) noteOutcomeLost(k outcomeKey, msg string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outcomeLost[k] = append(b.outcomeLost[k], &lostOutcome{msg: msg, at: at})
}

// loggedLost returns the message of the first line, one of msgs, that
// r's node logged about r's attempt, at or after r ended, and that no
// other run took; it takes it. It returns "" when there is none. Each line
// is one run's word: a task released is leased again at the same attempt
// number, maybe on the same node, and a line must not speak for both
// runs. b.mu is held.
func (b *modelBook) loggedLost(r *modelRun, msgs ...string) string {
	for _, l := range b.outcomeLost[outcomeKey{node: r.node, task: r.task, attempt: r.attempt}] {
		if l.used || l.at.Before(r.end) || !slices.Contains(msgs, l.msg) {
			continue
		}
		l.used = true
		return l.msg
	}
	return ""
}

// outcomeDropped reports whether r's node said it dropped r's outcome
// (loggedLost): the watchdog, a heartbeat, a lease granted anew or the end
// of a shutdown grace ended the lease or the handler's context after the
// handler returned and before the worker concluded, and the worker took
// the failure for the stop's, giving the lease back (the attempt not
// counted) or leaving the task to whoever ended the lease. Such a run has
// no history row of its own. b.mu is held.
func (b *modelBook) outcomeDropped(r *modelRun) bool {
	return !r.pull && b.loggedLost(r, msgStoppedLeaseLost, msgReturnedLeaseLost, msgStoppedAtShutdown) != ""
}

// reapKey names a reaped attempt: its task, number and start as stored.
type reapKey struct {
	task    string
	attempt int
	started int64 // Unix microseconds
}

// watchReaps adds to the test's database a table and a trigger that note,
// for every running task whose lease the store ends after its expiry (the
// reaper's outcome; a cancellation of an expired lease too), the attempt
// and the lease's expiry as stored then. Only such updates write a row.
func watchReaps(ctx context.Context, st *postgres.Store) error {
	_, err := st.Pool().Exec(ctx, `
CREATE TABLE mn_reaped (task_id text, attempt integer, started_at timestamptz, lease_expires_at timestamptz);
CREATE FUNCTION mn_note_reap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO mn_reaped VALUES (OLD.id, OLD.attempt, OLD.started_at, OLD.lease_expires_at);
	RETURN NULL;
END $$;
CREATE TRIGGER mn_note_reap AFTER UPDATE ON tasks FOR EACH ROW
	WHEN (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.lease_expires_at < NEW.updated_at)
	EXECUTE FUNCTION mn_note_reap()`)
	if err != nil {
		return fmt.Errorf("watch reaps: %w", err)
	}
	return nil
}

// reapedExpiries reads what watchReaps noted.
func reapedExpiries(ctx context.Context, st *postgres.Store) (map[reapKey]time.Time, error) {
	rows, err := st.Pool().Query(ctx, `SELECT task_id, attempt, started_at, lease_expires_at FROM mn_reaped`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[reapKey]time.Time{}
	for rows.Next() {
		var k reapKey
		var started, expires time.Time
		if err := rows.Scan(&k.task, &k.attempt, &started, &expires); err != nil {
			return nil, err
		}
		k.started = started.UnixMicro()
		out[k] = expires
	}
	return out, rows.Err()
}

// TestOutcomeDroppedTakesOnlyTheNodesWord: a run with no history row is
// excused by a line of its own node, about its task and attempt, logged
// after it ended, saying the outcome was dropped; each line excuses one
// run only.
func TestOutcomeDroppedTakesOnlyTheNodesWord(t *testing.T) {
	b := &modelBook{}
	b.initBook(1)
	log := slog.New(outcomeLog{next: slog.DiscardHandler, m: b})
	n1, n2 := log.With("node", "n1"), log.With("node", "n2")
	run := func(node string, attempt int) *modelRun {
		return &modelRun{task: "t1", node: node, attempt: attempt, end: time.Now()}
	}
	early := run("n1", 1)
	time.Sleep(time.Millisecond) // the line comes after early's end
	n1.Warn(msgStoppedLeaseLost, "task_id", "t1", "type", "x", "attempt", 1)
	n1.Error(msgOutcomeFailed, "task_id", "t1", "type", "x", "attempt", 2)
	n1.Info("task released", "task_id", "t1", "attempt", 3)
	n2.Warn(msgReturnedLeaseLost, "task_id", "t1", "attempt", 4)

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range []struct {
		name string
		r    *modelRun
		want bool
	}{
		{"a run that ended after the line", run("n1", 1), false},
		{"another attempt", run("n1", 5), false},
		{"an outcome whose commit failed: reaped, not dropped", run("n1", 2), false},
		{"a line that is no drop", run("n1", 3), false},
		{"another node's line", run("n1", 4), false},
		{"a pull run", &modelRun{task: "t1", node: "n1", attempt: 1, pull: true, end: early.end}, false},
		{"the run the line is about", early, true},
		{"a second run of the same attempt", &modelRun{task: "t1", node: "n1", attempt: 1, end: early.end}, false},
		{"the other node's run", &modelRun{task: "t1", node: "n2", attempt: 4, end: early.end}, true},
	} {
		if got := b.outcomeDropped(c.r); got != c.want {
			t.Errorf("%s: outcomeDropped %v, want %v", c.name, got, c.want)
		}
	}
}
