package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestLeaderRenewalCutMidwayLeavesNoLock: the holder's network path is cut
// silently just as the database answers its renewal, so the holder never
// hears back and the database never hears from it again. Once the lease
// expires, a standby must take it. AcquireLeader used to run in an explicit
// transaction: the cut left the holder's session idle in that transaction,
// holding the lease row's lock until the server noticed the dead peer (two
// hours and more with default keepalives), and every other node's attempt
// waited on that lock, so no node led. The same happened when a standby's
// own attempt was cut, since its upsert locks the row even when the lease is
// not free.
func TestLeaderRenewalCutMidwayLeavesNoLock(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, holder, standby := cutPair(t, dbURL, nil)
	ctx := t.Context()
	const ttl = 2 * time.Second
	now := time.Now()
	l, err := holder.AcquireLeader(ctx, store.LeaderParams{Name: "scheduler", NodeID: "holder-node", TTL: ttl, Now: now})
	if err != nil || l.NodeID != "holder-node" {
		t.Fatalf("first AcquireLeader = %+v, %v; want held by holder-node", l, err)
	}
	cutCall(t, proxy, "renewal", func(ctx context.Context) error {
		_, err := holder.AcquireLeader(ctx, store.LeaderParams{Name: "scheduler", NodeID: "holder-node", TTL: ttl, Now: now.Add(time.Second)})
		return err
	}, "holder-node")
	// Long after the lease expired, whatever the renewal did.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err = standby.AcquireLeader(wait, store.LeaderParams{Name: "scheduler", NodeID: "standby-node", TTL: ttl, Now: now.Add(time.Minute)})
	if err != nil || l.NodeID != "standby-node" {
		t.Fatalf("standby's AcquireLeader after the lease expired = %+v, %v (after %v); want the lease", l, err, time.Since(start).Round(time.Millisecond))
	}
}

// TestPromotionCutMidwayLeavesNoLockedTasks: the leader's network path is
// cut silently just as the database answers its promotion. The due tasks
// must end up promoted, by that statement or by the next leader's. The
// promotion used to run in an explicit transaction: the cut left the old
// leader's session idle in it, holding the row locks of every task it had
// selected, and the next leader's promotion skips locked rows, so those
// tasks stayed waiting until the server noticed the dead peer (hours).
func TestPromotionCutMidwayLeavesNoLockedTasks(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, old, next := cutPair(t, dbURL, nil)
	ctx := t.Context()
	tasks := newTasks("due", 3)
	for i := range tasks {
		tasks[i].RunAt = t0.Add(time.Second)
	}
	if _, err := next.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// The command tag of an UPDATE of the three tasks, or of a query whose
	// one row counts them.
	cutCall(t, proxy, "promotion", func(ctx context.Context) error {
		_, err := old.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: t0.Add(2 * time.Second)})
		return err
	}, "UPDATE 3", "SELECT 1")
	n, err := next.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: t0.Add(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range tasks {
		task, err := next.GetTask(ctx, nt.ID)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != store.StatePending {
			t.Errorf("task %s is %s after the next leader's promotion (which promoted %d); want pending", nt.ID, task.State, n)
		}
	}
}

// TestRetentionCutMidwayLeavesNoLockedTasks: the leader's network path is
// cut silently just as the database answers a retention pass. The tasks
// past their age must end up deleted, by that pass or by the next
// leader's. Retention used to run in an explicit transaction: the cut left
// the old leader's session idle in it, holding the locks of the tasks it
// was deleting (which the next leader's retention skips, and a redrive or
// purge of them waits for) and of the retention totals' rows it had counted
// them in, until the server noticed the dead peer (hours).
func TestRetentionCutMidwayLeavesNoLockedTasks(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, old, next := cutPair(t, dbURL, nil)
	ctx := t.Context()
	tasks := newTasks("old", 3)
	if _, err := next.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, nt := range tasks {
		if _, err := next.CancelTask(ctx, store.CancelParams{ID: nt.ID, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	p := store.RetentionParams{Limit: 10, CancelledBefore: t0.Add(time.Hour)}
	// The command tag of the query whose one row counts the deleted tasks.
	cutCall(t, proxy, "retention", func(ctx context.Context) error {
		_, err := old.DeleteFinished(ctx, p)
		return err
	}, "SELECT 1")
	res, err := next.DeleteFinished(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range tasks {
		if task, err := next.GetTask(ctx, nt.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("task %s after the next leader's retention (which deleted %+v): %s, %v; want it deleted", nt.ID, res, task.State, err)
		}
	}
}

// TestKeyedInsertCutMidwayLeavesKeyFree: a node's network path is cut
// silently just as the database answers its keyed insert. Another node's
// enqueue of the same key must answer at once, with the task of whichever
// insert holds the key. The keyed insert used to run in an explicit
// transaction: the cut left the first node's session idle in it, its
// uncommitted row holding the key in the unique index, and every other
// insert of that key waited on it until the server noticed the dead peer
// (hours): a client's idempotent retry of a request hung.
func TestKeyedInsertCutMidwayLeavesKeyFree(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, cut, other := cutPair(t, dbURL, nil)
	ctx := t.Context()
	first := store.NewTask{ID: "first", Type: "email", IdempotencyKey: "order-1"}
	cutCall(t, proxy, "keyed insert", func(ctx context.Context) error {
		_, err := cut.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{first}, Now: t0})
		return err
	}, "INSERT 0 1", "SELECT 1")
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := other.InsertTasks(wait, store.InsertParams{Tasks: []store.NewTask{{ID: "second", Type: "email", IdempotencyKey: "order-1"}}, Now: t0})
	if err != nil {
		t.Fatalf("other node's insert of the same key: %v (after %v); want an answer at once", err, time.Since(start).Round(time.Millisecond))
	}
	if got := res[0].Task.ID; got != "first" && got != "second" {
		t.Fatalf("other node's insert answered task %q", got)
	}
}

// TestCancelCutMidwayLeavesNoLock: a node's network path is cut silently
// just as the database answers its cancellation of a task. Another node's
// cancellation of that task must answer at once. CancelTask used to read
// the task's lease under a row lock in an explicit transaction: the cut left
// the session idle in it, holding the task's row lock until the server
// noticed the dead peer (hours), and every write to the task (a cancel, a
// retry, the worker's outcome, its lease's expiry) waited on it.
func TestCancelCutMidwayLeavesNoLock(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, cut, other := cutPair(t, dbURL, nil)
	ctx := t.Context()
	task := leased(t, other, "cancel", 1, t0)[0]
	// The lock's read, or the one statement that cancels.
	cutCall(t, proxy, "cancellation", func(ctx context.Context) error {
		_, err := cut.CancelTask(ctx, store.CancelParams{ID: task.ID, Now: t0})
		return err
	}, "SELECT 1")
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := other.CancelTask(wait, store.CancelParams{ID: task.ID, Now: t0.Add(time.Second)})
	var conflict *store.ConflictError
	if err != nil && !(errors.As(err, &conflict) && conflict.State == store.StateCancelled) {
		t.Fatalf("other node's cancellation: %v (after %v); want it cancelled at once", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestRetryTaskCutMidwayLeavesNoLock: a node's network path is cut
// silently just as the database answers its manual retry of a cancelled
// task. Another node's retry of that task must answer at once. RetryTask
// used to run in an explicit transaction: the cut left the session idle in
// it, holding the task's row lock until the server noticed the dead peer
// (hours).
func TestRetryTaskCutMidwayLeavesNoLock(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, cut, other := cutPair(t, dbURL, nil)
	ctx := t.Context()
	tasks := newTasks("retry", 1)
	if _, err := other.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.CancelTask(ctx, store.CancelParams{ID: tasks[0].ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// The update's tag, or that of the one statement that retries.
	cutCall(t, proxy, "retry", func(ctx context.Context) error {
		_, err := cut.RetryTask(ctx, store.RetryParams{ID: tasks[0].ID, Now: t0})
		return err
	}, "UPDATE 1", "SELECT 1")
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := other.RetryTask(wait, store.RetryParams{ID: tasks[0].ID, Now: t0.Add(time.Second)})
	var conflict *store.ConflictError
	if err != nil && !(errors.As(err, &conflict) && conflict.State == store.StatePending) {
		t.Fatalf("other node's retry: %v (after %v); want it retried at once", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestRedriveCutMidwayLeavesNoLockedTasks: a node's network path is cut
// silently just as the database answers its redrive of dead tasks. The
// tasks must end up pending, by that redrive or by the next one. RedriveDead
// used to run in an explicit transaction: the cut left the session idle in
// it, holding the locks of the tasks it selected, which the next redrive
// skips (and a purge too), so they stayed dead until the server noticed the
// dead peer (hours).
func TestRedriveCutMidwayLeavesNoLockedTasks(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy, cut, other := cutPair(t, dbURL, nil)
	ctx := t.Context()
	tasks := leased(t, other, "dead", 3, t0)
	var outs []store.Outcome
	for _, task := range tasks {
		outs = append(outs, store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateDead, DeadReason: store.DeadNonRetryable,
			Error: &store.ErrorInfo{Code: "bad", Message: "bad input", Class: "permanent"}, OutcomeKind: store.OutcomeFailed})
	}
	if errs, err := other.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: t0}); err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
	// The update's tag, or that of the one query that counts the tasks.
	cutCall(t, proxy, "redrive", func(ctx context.Context) error {
		_, err := cut.RedriveDead(ctx, store.DeadFilter{Now: t0.Add(time.Second)})
		return err
	}, "UPDATE 3", "SELECT 1")
	n, err := other.RedriveDead(ctx, store.DeadFilter{Now: t0.Add(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		got, err := other.GetTask(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StatePending {
			t.Errorf("task %s is %s after the next redrive (which redrove %d); want pending", task.ID, got.State, n)
		}
	}
}

// TestStatsCutMidwayReleasesItsLocksSoon: a node's network path is cut
// silently just as the database answers a query of its statistics'
// transaction. The server must end that session within the store's idle
// limit (shortened here), releasing its locks. It used to keep the session
// idle in its transaction until it noticed the dead peer (hours), holding
// a snapshot (vacuum could clean no task row deleted since) and share
// locks on the tables: a migration's ALTER TABLE waited for them, and
// every query of every node queued behind the migration.
func TestStatsCutMidwayReleasesItsLocksSoon(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	// Migrated already (by other, opened first): the store starts no
	// transaction before the test's.
	proxy, cut, other := cutPair(t, dbURL, func(c *Config) { c.AutoMigrate = false })
	cut.idleTxLimit = time.Second
	ctx := t.Context()
	if _, err := other.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("stats", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	// The first query's one row: a type and state with its count.
	cutCall(t, proxy, "statistics query", func(ctx context.Context) error {
		_, err := cut.Stats(ctx, store.StatsParams{Since: t0})
		return err
	}, "SELECT 1")
	// What a migration does first: lock the tables it alters.
	c := connect(t, dbURL)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	start := time.Now()
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE tasks, attempts IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatalf("locking the tables after the cut: %v (after %v); want the cut session ended within its idle limit", err, time.Since(start).Round(time.Millisecond))
	}
}

// cutPair opens two stores on the database at dbURL: cut, whose
// connections go through a proxy that can cut them silently (cfg, if set,
// adjusts its configuration), and other, connected directly. The proxy
// closes when the test ends, before cut's Close (which waits for the cut
// connections).
func cutPair(t *testing.T, dbURL string, cfg func(*Config)) (proxy *cutProxy, cut, other *Store) {
	t.Helper()
	proxy, proxied := newCutProxy(t, dbURL)
	other = openURL(t, dbURL, nil) // first: it migrates the database
	cut = openURL(t, proxied, cfg)
	t.Cleanup(proxy.close)
	return proxy, cut, other
}

// cutCall runs call (what it does, for messages) with the connection cut
// silently at the first server reply holding one of patterns, bounded to
// a second, and fails the test unless the call failed and the proxy did
// cut a reply.
func cutCall(t *testing.T, proxy *cutProxy, what string, call func(context.Context) error, patterns ...string) {
	t.Helper()
	proxy.cutOnReply(patterns...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := call(ctx); err == nil {
		t.Fatalf("%s over a path cut before its reply succeeded", what)
	}
	if proxy.replyCut.Load() != nil {
		t.Fatalf("the %s's reply never came through the proxy; the test cut nothing", what)
	}
}
