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
	proxy, proxied := newCutProxy(t, dbURL)
	holder := openURL(t, proxied, nil)
	t.Cleanup(proxy.close) // before the holder's Close, which waits for the cut connection
	standby := openURL(t, dbURL, nil)
	ctx := t.Context()
	const ttl = 2 * time.Second
	now := time.Now()
	l, err := holder.AcquireLeader(ctx, store.LeaderParams{Name: "scheduler", NodeID: "holder-node", TTL: ttl, Now: now})
	if err != nil || l.NodeID != "holder-node" {
		t.Fatalf("first AcquireLeader = %+v, %v; want held by holder-node", l, err)
	}
	proxy.cutOnReply("holder-node")
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = holder.AcquireLeader(short, store.LeaderParams{Name: "scheduler", NodeID: "holder-node", TTL: ttl, Now: now.Add(time.Second)})
	cancel()
	if err == nil {
		t.Fatal("renewal over a path cut before its reply succeeded")
	}
	if proxy.replyCut.Load() != nil {
		t.Fatal("the renewal's reply never came through the proxy; the test cut nothing")
	}
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
	proxy, proxied := newCutProxy(t, dbURL)
	old := openURL(t, proxied, nil)
	t.Cleanup(proxy.close) // before the old leader's Close, which waits for the cut connection
	next := openURL(t, dbURL, nil)
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
	proxy.cutOnReply("UPDATE 3", "SELECT 1")
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err := old.PromoteDue(short, store.PromoteParams{Limit: 10, Now: t0.Add(2 * time.Second)})
	cancel()
	if err == nil {
		t.Fatal("promotion over a path cut before its reply succeeded")
	}
	if proxy.replyCut.Load() != nil {
		t.Fatal("the promotion's reply never came through the proxy; the test cut nothing")
	}
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
	proxy, proxied := newCutProxy(t, dbURL)
	old := openURL(t, proxied, nil)
	t.Cleanup(proxy.close) // before the old leader's Close, which waits for the cut connection
	next := openURL(t, dbURL, nil)
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
	proxy.cutOnReply("SELECT 1")
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err := old.DeleteFinished(short, p)
	cancel()
	if err == nil {
		t.Fatal("retention over a path cut before its reply succeeded")
	}
	if proxy.replyCut.Load() != nil {
		t.Fatal("the retention's reply never came through the proxy; the test cut nothing")
	}
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
