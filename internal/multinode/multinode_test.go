package multinode

import (
	"context"
	"testing"
	"time"
)

const workloadSize = 10_000

// TestLeaderKilled runs three node processes on one database, each a
// `retryq server` (the command's own code: flags, database, schema check,
// engine, election, HTTP API, started in-process by cli.StartServer) with
// an in-process worker on its engine. It SIGKILLs the elected leader mid-run
// and checks that:
//
//   - another node takes the scheduler lease within takeoverWait;
//   - every task the dead node held is reaped (a lease_expired attempt held
//     by the dead node) and finished by a surviving node;
//   - every task ends exactly as its payload dictates (state, attempt count,
//     dead reason), lease_expired attempts occur only on the dead node, and
//     no two runs of one task overlapped in time.
func TestLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	start := time.Now()
	c := newCluster(t)
	client := c.newClient()
	c.configure(client)
	c.startNodes(nodeCount)
	t.Logf("%d nodes up, leader elected after %s", nodeCount, time.Since(start).Round(time.Millisecond))

	t0 := time.Now()
	c.enqueue(client, workloadSize)
	t.Logf("enqueued %d tasks in %s", workloadSize, time.Since(t0).Round(time.Millisecond))
	waitFor(t, 60*time.Second, "30% of the tasks finished", func() (bool, error) {
		n, err := c.finished()
		return n >= workloadSize*3/10, err
	})

	leaderID, _, err := c.leader()
	if err != nil {
		t.Fatal(err)
	}
	victim := c.nodes[leaderID]
	if victim == nil {
		t.Fatalf("leader %q is not one of the nodes", leaderID)
	}
	waitFor(t, 10*time.Second, "the leader to hold running tasks", func() (bool, error) {
		n, err := c.runningOn(victim.id)
		return n > 0, err
	})
	// Still the leader, and alive, right before the kill.
	if id, live, err := c.leader(); err != nil || id != victim.id || !live {
		t.Fatalf("just before the kill the leader is %q (live %v, err %v), want %s", id, live, err, victim.id)
	}
	c.kill(victim)
	killedAt := victim.killed
	t.Logf("SIGKILLed leader %s at %s", victim.id, killedAt.Format(time.StampMilli))

	// Once the dead node's backends are gone, no commit of it can still
	// land: the tasks it leased now are exactly the tasks it held.
	waitFor(t, 10*time.Second, "the dead node's connections to close", func() (bool, error) {
		ctx, cancel := c.ctx()
		defer cancel()
		var n int
		err := c.st.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", victim.id).Scan(&n)
		return n == 0, err
	})
	held := c.heldBy(victim.id)
	if len(held) == 0 {
		t.Fatalf("the dead node held no tasks when it died")
	}
	t.Logf("the dead node held %d running tasks", len(held))

	waitFor(t, takeoverWait, "a new leader", func() (bool, error) {
		id, live, err := c.leader()
		if err != nil {
			return false, err
		}
		nd := c.nodes[id]
		return live && nd != nil && nd != victim && !nd.exited(), nil
	})
	took := time.Since(killedAt)
	newLeader, _, _ := c.leader()
	t.Logf("new leader %s elected %s after the kill (leader TTL %s)", newLeader, took.Round(time.Millisecond), leaderTTL)
	if took > takeoverWait {
		t.Errorf("new leader elected %s after the kill, want within %s", took, takeoverWait)
	}

	// The reaper hands the dead node's tasks back.
	waitFor(t, 30*time.Second, "the dead node's tasks to be reaped", func() (bool, error) {
		n, err := c.runningOn(victim.id)
		return n == 0, err
	})
	t.Logf("the dead node's leases were reaped %s after the kill (lease %s)", time.Since(killedAt).Round(time.Millisecond), leaseDur)

	c.waitFinished(workloadSize, 90*time.Second)
	t.Logf("all %d tasks finished %s after the kill, %s after enqueue", workloadSize, time.Since(killedAt).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	// The registry shows the new leader's role (refreshed every 5s).
	waitFor(t, 15*time.Second, "the node registry to show the new leader", func() (bool, error) {
		ns, err := c.liveNodes()
		if err != nil {
			return false, err
		}
		for _, n := range ns {
			if n.ID == newLeader {
				return n.Role == "leader", nil
			}
		}
		return false, nil
	})

	c.stopAll()
	rep := c.verify(workloadSize, func(node string) bool { return node == victim.id })

	// Every task the dead node held was reaped under its lease and then
	// finished by another node.
	tasks := c.readTasks()
	for id, attempt := range held {
		tr := tasks[id]
		if tr == nil {
			t.Errorf("held task %s vanished", id)
			continue
		}
		if attempt > len(tr.hist) || tr.hist[attempt-1].outcome != "lease_expired" || nodeOf(tr.hist[attempt-1].worker) != victim.id {
			t.Errorf("task %s was held by %s at attempt %d but its history is %+v", id, victim.id, attempt, tr.hist)
			continue
		}
		if !tr.state.Terminal() {
			t.Errorf("held task %s ended %s", id, tr.state)
		}
		if last := tr.hist[len(tr.hist)-1]; last.outcome != "lease_expired" && nodeOf(last.worker) == victim.id {
			t.Errorf("held task %s: last attempt on the dead node", id)
		}
	}
	if got := rep.reapedByNode[victim.id]; got != len(held) {
		t.Errorf("%d lease_expired attempts on the dead node, want %d (the tasks it held)", got, len(held))
	}
	t.Logf("classes %v; %d attempts; %d tasks reaped (%d finished their run but died before the commit, %d never reached a handler)",
		rep.byClass, rep.attempts, rep.reaped, rep.lostOutcomes, rep.unstarted)
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

// TestDatabaseRestart restarts the PostgreSQL server under three busy nodes
// and checks that they log the outage, reconnect and finish the work: every
// task ends exactly as its payload dictates (attempts whose outcome could not
// be committed are reaped as lease_expired and retried), none is left
// running, no two runs of one task overlapped, a leader is elected again and
// every node still shuts down cleanly.
func TestDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	start := time.Now()
	c := newCluster(t)
	client := c.newClient()
	c.configure(client)
	c.startNodes(nodeCount)

	t0 := time.Now()
	c.enqueue(client, workloadSize)
	waitFor(t, 60*time.Second, "30% of the tasks finished", func() (bool, error) {
		n, err := c.finished()
		return n >= workloadSize*3/10, err
	})
	before, err := c.finished()
	if err != nil {
		t.Fatal(err)
	}
	if before >= workloadSize {
		t.Fatalf("all %d tasks finished before the restart: nothing was in flight", before)
	}
	r0 := time.Now()
	if err := c.pg.Restart(); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	t.Logf("restarted PostgreSQL in %s with %d of %d tasks finished", time.Since(r0).Round(time.Millisecond), before, workloadSize)

	waitFor(t, takeoverWait, "a live leader after the restart", func() (bool, error) {
		id, live, err := c.leader()
		return live && c.nodes[id] != nil, err
	})
	c.waitFinished(workloadSize, 90*time.Second)
	t.Logf("all %d tasks finished %s after the restart, %s after enqueue", workloadSize, time.Since(r0).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	var running int
	err = c.st.Pool().QueryRow(ctx, "SELECT count(*) FROM tasks WHERE state NOT IN ('succeeded', 'dead')").Scan(&running)
	cancel()
	if err != nil || running != 0 {
		t.Errorf("%d tasks not finished (err %v)", running, err)
	}

	c.stopAll()
	rep := c.verify(workloadSize, func(string) bool { return true })
	warns, reconnects := 0, 0
	for _, n := range c.sortedNodes() {
		w := c.countLines(n, "level=WARN") + c.countLines(n, "level=ERROR")
		r := c.countLines(n, "listener reconnected")
		t.Logf("node %s: %d warnings/errors, %d listener reconnects: %v", n.id, w, r, c.warningKinds(n))
		warns += w
		reconnects += r
	}
	if warns == 0 {
		t.Errorf("no node logged the database outage")
	}
	if reconnects < nodeCount {
		t.Errorf("%d wakeup-listener reconnects logged, want at least one per node", reconnects)
	}
	t.Logf("classes %v; %d attempts; %d tasks reaped (%d finished their run but could not commit, %d never reached a handler)",
		rep.byClass, rep.attempts, rep.reaped, rep.lostOutcomes, rep.unstarted)
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}
