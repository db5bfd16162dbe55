package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// killAll records the leased tasks as dead (permanent error) at now.
func killAll(t *testing.T, s *Store, tasks []store.Task, now time.Time) {
	t.Helper()
	var outs []store.Outcome
	for _, task := range tasks {
		outs = append(outs, store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateDead, DeadReason: store.DeadNonRetryable,
			Error: &store.ErrorInfo{Code: "bad", Message: "bad input", Class: "permanent"}, OutcomeKind: store.OutcomeFailed})
	}
	if errs, err := s.RecordOutcomes(t.Context(), store.OutcomeParams{Outcomes: outs, Now: now}); err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
}

// TestRedriveAndPurgeWaitForALockedDeadTask: a redrive or purge that finds
// a matching dead task locked by another transaction (a cancel of the dead
// task, a stale heartbeat or outcome, a retention or purge pass later
// rolled back) waits for it and then takes the task if it is still dead
// and matching, as on SQLite. They used to skip it (SKIP LOCKED): the
// bulk redrive reported fewer tasks than matched and silently left the
// task dead, or the purge left it in the DLQ, while the caller believed
// the whole selection was handled.
func TestRedriveAndPurgeWaitForALockedDeadTask(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		call func(context.Context, *Store) (int, error)
		want func(store.Task, error) bool
	}{
		{"redrive", func(ctx context.Context, s *Store) (int, error) {
			return s.RedriveDead(ctx, store.DeadFilter{Now: t0.Add(time.Minute)})
		}, func(got store.Task, err error) bool { return err == nil && got.State == store.StatePending }},
		{"purge", func(ctx context.Context, s *Store) (int, error) {
			return s.PurgeDead(ctx, store.DeadFilter{})
		}, func(_ store.Task, err error) bool { return errors.Is(err, store.ErrNotFound) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.URL(t)
			s := openURL(t, dbURL, nil)
			ctx := t.Context()
			tasks := leased(t, s, "dead", 3, t0)
			killAll(t, s, tasks, t0)

			// Another session locks the middle task and keeps it, as a
			// transaction that leaves the row as it is.
			x := connect(t, dbURL)
			tx, err := x.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(ctx, "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", tasks[1].ID); err != nil {
				t.Fatal(err)
			}

			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := c.call(ctx, s)
				done <- result{n, err}
			}()
			w := connect(t, dbURL)
			var early *result
			for deadline := time.Now().Add(30 * time.Second); early == nil; time.Sleep(5 * time.Millisecond) {
				select {
				case r := <-done:
					early = &r
					continue
				default:
				}
				var waiting bool
				if err := w.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the %s neither finished nor waited for the locked task", c.name)
				}
			}
			if early != nil {
				t.Fatalf("the %s finished while a matching dead task was locked: %d of 3 tasks, %v", c.name, early.n, early.err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the %s did not finish once the lock was released", c.name)
			}
			if r.err != nil || r.n != 3 {
				t.Fatalf("%s = %d, %v; want all 3 dead tasks", c.name, r.n, r.err)
			}
			for _, task := range tasks {
				if got, err := s.GetTask(ctx, task.ID); !c.want(got, err) {
					t.Errorf("task %s after the %s: %s, %v", task.ID, c.name, got.State, err)
				}
			}
		})
	}
}
