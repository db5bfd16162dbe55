package multinode

// What TestEnginesRestartedAtRandom needs to tell a finished attempt whose
// outcome missed its lease (at-least-once: the reaper retries it) from a
// handler that ran past its lease: the outcomes the engines said they
// could not record, and the lease expiry of every reaped attempt as the
// store held it when the reaper took it.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
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
)

// outcomeKey names one attempt's outcome as a node logged it.
type outcomeKey struct {
	node, task string
	attempt    int
}

// outcomeLog is the engines' slog.Handler: it notes in the model every
// outcome a node logged as not recorded, and passes records on to next
// (the RETRYQ_MULTINODE_LOG file, or nothing).
type outcomeLog struct {
	next slog.Handler
	m    *mnModel
	node string // from the engine's Logger.With("node", ...)
}

func (h outcomeLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h outcomeLog) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case msgOutcomeFailed, msgOutcomeRefused, msgStoppedLeaseLost, msgReturnedLeaseLost:
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
		h.m.noteOutcomeLost(k, r.Message)
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

// noteOutcomeLost records that k's outcome was logged as not recorded.
func (m *mnModel) noteOutcomeLost(k outcomeKey, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomeLost[k] = msg
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
