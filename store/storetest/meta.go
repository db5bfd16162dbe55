package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/retryq/retryq/store"
)

var statsTests = []testCase{
	{"Stats", testStats},
}

var metaTests = []testCase{
	{"Types", testTypes},
	{"Types/Invalid", testTypesInvalid},
	{"Leader", testLeader},
	{"Nodes", testNodes},
}

var lifecycleTests = []testCase{
	{"Lifecycle/SchemaAndPing", testSchema},
	{"Lifecycle/Close", testClose},
	{"Lifecycle/GroupStats", testGroupStats},
}

// testGroupStats: a store that counts its shared transactions counts each
// insert as a write and never more transactions than writes.
func testGroupStats(e *env) {
	gc, ok := e.s.(store.GroupCounter)
	if !ok {
		e.t.Skip("the store does not implement store.GroupCounter")
	}
	before := gc.GroupStats()
	for i := range 5 {
		e.insert(base, nt(fmt.Sprintf("g_%d", i), "a"))
	}
	after := gc.GroupStats()
	writes, groups := after.Writes-before.Writes, after.Groups-before.Groups
	if writes < 5 || groups < 1 || groups > writes {
		e.t.Fatalf("GroupStats moved by %d writes in %d transactions after 5 inserts: want >= 5 writes in 1..writes transactions", writes, groups)
	}
}

func testStats(e *env) {
	// Type a: one task per state; the dead one failed twice. Type b: pending.
	at := base.Add
	e.makeState(at(0), nt("a_sched", "a"), store.StateScheduled)
	e.makeState(at(0), nt("a_run", "a"), store.StateRunning)
	e.makeState(at(time.Minute), nt("a_ok", "a"), store.StateSucceeded)         // attempt 1 ok at +1m
	e.makeState(at(2*time.Minute), nt("a_retry", "a"), store.StateRetryWaiting) // attempt 1 failed at +2m
	d := e.start(at(3*time.Minute), nt("a_dead", "a"))
	e.mustRecord(at(3*time.Minute), failRetry(d, at(3*time.Minute), "E")) // attempt 1 failed at +3m, pending
	d = e.lease(at(4*time.Minute), "a_dead", "a")
	reap := kill(d, "E", store.DeadMaxAttempts)
	reap.OutcomeKind, reap.ReapExpired = store.OutcomeLeaseExpired, true
	e.mustRecord(at(4*time.Minute+leaseDur+time.Second), reap) // attempt 2 lease_expired
	e.makeState(at(0), nt("a_cancel", "a"), store.StateCancelled)
	e.makeState(at(0), nt("a_pend", "a"), store.StatePending)
	e.makeState(at(0), nt("b_pend", "b"), store.StatePending)

	stats := func(since time.Time) map[string]store.TypeStats {
		e.t.Helper()
		st, err := e.s.Stats(e.ctx, store.StatsParams{Since: since})
		e.noErr("Stats", err)
		m := map[string]store.TypeStats{}
		for _, ts := range st {
			if _, dup := m[ts.Type]; dup {
				e.t.Fatalf("Stats lists type %s twice", ts.Type)
			}
			for k, v := range ts.Counts {
				if v == 0 {
					delete(ts.Counts, k)
				}
			}
			m[ts.Type] = ts
		}
		return m
	}
	one := map[store.State]int{}
	for _, s := range store.States {
		one[s] = 1
	}
	got := stats(time.Time{})
	e.eq("types", len(got), 2)
	e.eq("a", got["a"], store.TypeStats{Type: "a", Counts: one, FirstAttempts: 3, Retries: 1, Failures: 3})
	e.eq("b", got["b"], store.TypeStats{Type: "b", Counts: map[store.State]int{store.StatePending: 1}})
	got = stats(at(2 * time.Minute))
	e.eq("a since +2m", got["a"], store.TypeStats{Type: "a", Counts: one, FirstAttempts: 2, Retries: 1, Failures: 3})
	got = stats(at(time.Hour))
	e.eq("a since +1h", got["a"], store.TypeStats{Type: "a", Counts: one})
}

func testTypes(e *env) {
	_, err := e.s.GetType(e.ctx, "email")
	e.isErr("GetType(unknown)", err, store.ErrNotFound)
	ts, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	e.eq("types of an empty store", len(ts), 0)

	in := store.TypeConfig{Type: "email", Policy: json.RawMessage(`{"max_attempts": 5, "backoff": {"base": "1s", "jitter": 0.5}}`),
		Timeout: 30 * time.Second, Priority: 3, Target: json.RawMessage(`{"url": "http://x/y"}`)}
	out, err := e.s.PutType(e.ctx, in, base)
	e.noErr("PutType", err)
	e.eqTime("UpdatedAt", out.UpdatedAt, base)
	check := func(what string, got, want store.TypeConfig) {
		e.t.Helper()
		if got.Type != want.Type || got.Timeout != want.Timeout || got.Priority != want.Priority ||
			!jsonEqual(got.Policy, want.Policy) || !jsonEqual(got.Target, want.Target) || !got.UpdatedAt.Equal(want.UpdatedAt) {
			e.t.Fatalf("%s: got %+v (policy %s, target %s), want %+v (policy %s, target %s)",
				what, got, got.Policy, got.Target, want, want.Policy, want.Target)
		}
	}
	in.UpdatedAt = base
	got, err := e.s.GetType(e.ctx, "email")
	e.noErr("GetType", err)
	check("GetType", got, in)

	// Replace, with empty policy and target.
	in2 := store.TypeConfig{Type: "email", Timeout: time.Minute, Priority: -1}
	_, err = e.s.PutType(e.ctx, in2, base.Add(time.Minute))
	e.noErr("PutType (replace)", err)
	in2.UpdatedAt = base.Add(time.Minute)
	got, err = e.s.GetType(e.ctx, "email")
	e.noErr("GetType", err)
	check("GetType after replace", got, in2)

	for _, typ := range []string{"sms", "a-first"} {
		_, err := e.s.PutType(e.ctx, store.TypeConfig{Type: typ, Policy: json.RawMessage(`{}`)}, base)
		e.noErr("PutType", err)
	}
	ts, err = e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	var names []string
	for _, t := range ts {
		names = append(names, t.Type)
	}
	e.eq("ListTypes", names, []string{"a-first", "email", "sms"})
	check("listed type", ts[1], in2)
}

func testLeader(e *env) {
	acquire := func(node string, now time.Time) store.Lease {
		e.t.Helper()
		l, err := e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "scheduler", NodeID: node, TTL: 10 * time.Second, Now: now})
		e.noErr("AcquireLeader", err)
		l.ExpiresAt = l.ExpiresAt.UTC()
		return l
	}
	release := func(node string) {
		e.t.Helper()
		e.noErr("ReleaseLeader", e.s.ReleaseLeader(e.ctx, store.LeaderParams{Name: "scheduler", NodeID: node}))
	}
	lease := func(node string, exp time.Duration) store.Lease {
		return store.Lease{Name: "scheduler", NodeID: node, ExpiresAt: base.Add(exp)}
	}
	// GetLeader reads the lease as stored, expired or not, and writes nothing.
	get := func(what string, want store.Lease) {
		e.t.Helper()
		l, err := e.s.GetLeader(e.ctx, "scheduler")
		if want == (store.Lease{}) {
			if !errors.Is(err, store.ErrNotFound) {
				e.t.Errorf("GetLeader %s: %+v, %v; want ErrNotFound", what, l, err)
			}
			return
		}
		e.noErr("GetLeader "+what, err)
		l.ExpiresAt = l.ExpiresAt.UTC()
		e.eq("GetLeader "+what, l, want)
	}
	get("before any lease", store.Lease{})
	e.eq("free lease", acquire("n1", base), lease("n1", 10*time.Second))
	get("held", lease("n1", 10*time.Second))
	e.eq("held by another", acquire("n2", base.Add(5*time.Second)), lease("n1", 10*time.Second))
	e.eq("renewed by the holder", acquire("n1", base.Add(6*time.Second)), lease("n1", 16*time.Second))
	e.eq("at the expiry instant", acquire("n2", base.Add(16*time.Second)), lease("n1", 16*time.Second))
	get("expired, not taken over", lease("n1", 16*time.Second))
	e.eq("taken over after expiry", acquire("n2", base.Add(17*time.Second)), lease("n2", 27*time.Second))
	get("taken over", lease("n2", 27*time.Second))
	e.eq("old holder refused", acquire("n1", base.Add(18*time.Second)), lease("n2", 27*time.Second))
	release("n1") // not the holder: no effect
	e.eq("after a foreign release", acquire("n1", base.Add(19*time.Second)), lease("n2", 27*time.Second))
	release("n2")
	get("after release", store.Lease{})
	e.eq("after release", acquire("n1", base.Add(20*time.Second)), lease("n1", 30*time.Second))
	// Leases are independent by name.
	other, err := e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: "reaper", NodeID: "n2", TTL: time.Second, Now: base.Add(20 * time.Second)})
	e.noErr("AcquireLeader(other name)", err)
	e.eq("other lease holder", other.NodeID, "n2")
	get("beside another name's lease", lease("n1", 30*time.Second))
}

func testNodes(e *env) {
	list := func(since time.Time) []store.Node {
		e.t.Helper()
		ns, err := e.s.ListNodes(e.ctx, since)
		e.noErr("ListNodes", err)
		sort.Slice(ns, func(i, j int) bool { return ns[i].ID < ns[j].ID })
		for i := range ns {
			ns[i].StartedAt, ns[i].LastSeen = ns[i].StartedAt.UTC(), ns[i].LastSeen.UTC()
		}
		return ns
	}
	e.eq("no nodes", len(list(time.Time{})), 0)
	n1 := store.Node{ID: "n1", Host: "host-1", Version: "v1.0.0", Role: "leader", StartedAt: base}
	n2 := store.Node{ID: "n2", Host: "host-2", Version: "v1.0.0", Role: "standby", StartedAt: base.Add(time.Second)}
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, n1, base))
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, n2, base.Add(10*time.Second)))
	n1.LastSeen, n2.LastSeen = base, base.Add(10*time.Second)
	e.eq("all nodes", list(time.Time{}), []store.Node{n1, n2})
	e.eq("seen since +5s", list(base.Add(5*time.Second)), []store.Node{n2})
	e.eq("seen since +10s (inclusive)", list(base.Add(10*time.Second)), []store.Node{n2})
	n1.Role = "standby"
	e.noErr("HeartbeatNode", e.s.HeartbeatNode(e.ctx, n1, base.Add(20*time.Second)))
	n1.LastSeen = base.Add(20 * time.Second)
	e.eq("after a second heartbeat", list(base.Add(15*time.Second)), []store.Node{n1})

	// Pruning: rows last seen strictly before the cut-off go, counted.
	prune := func(before time.Time) int {
		e.t.Helper()
		n, err := e.s.PruneNodes(e.ctx, store.PruneNodesParams{SeenBefore: before})
		e.noErr("PruneNodes", err)
		return n
	}
	e.eq("pruned with a zero cut-off", prune(time.Time{}), 0)
	e.eq("pruned before +15s", prune(base.Add(15*time.Second)), 1)
	e.eq("nodes after pruning before +15s", list(time.Time{}), []store.Node{n1})
	e.eq("pruned before +20s (n1 seen at +20s stays)", prune(base.Add(20*time.Second)), 0)
	e.eq("pruned before +20s and 1µs", prune(base.Add(20*time.Second+time.Microsecond)), 1)
	e.eq("nodes after pruning all", len(list(time.Time{})), 0)
}

func testSchema(e *env) {
	applied, known, err := e.s.SchemaVersion(e.ctx)
	e.noErr("SchemaVersion", err)
	if known <= 0 || applied != known {
		e.t.Fatalf("SchemaVersion = %d applied, %d known; want equal and positive", applied, known)
	}
	e.noErr("Ping", e.s.Ping(e.ctx))
}

func testClose(e *env) {
	e.insert(base, nt("t_1", "a"))
	e.noErr("Close", e.s.Close())
	checks := map[string]error{}
	_, checks["GetTask"] = e.s.GetTask(e.ctx, "t_1")
	_, checks["InsertTasks"] = e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_2", "a")}})
	_, checks["FetchTasks"] = e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
	_, checks["RecordOutcomes"] = e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Now: base, Outcomes: []store.Outcome{{TaskID: "t_1", LeaseID: "x", State: store.StateSucceeded}}})
	_, checks["PromoteDue"] = e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 1, Now: base})
	_, _, checks["ListTasks"] = e.s.ListTasks(e.ctx, store.ListParams{Limit: 1})
	_, checks["Stats"] = e.s.Stats(e.ctx, store.StatsParams{})
	_, checks["PruneNodes"] = e.s.PruneNodes(e.ctx, store.PruneNodesParams{SeenBefore: base})
	checks["Ping"] = e.s.Ping(e.ctx)
	for name, err := range checks {
		if !errors.Is(err, store.ErrClosed) {
			e.t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// testTypesInvalid: PutType refuses, with ErrInvalid and storing nothing,
// a configuration a backend could not store as given: a priority that
// does not fit in 32 bits (store.Fits32, as for a task) and an empty name.
func testTypesInvalid(e *env) {
	for _, prio := range []int{1 << 31, -1<<31 - 1, 1 << 40} {
		_, err := e.s.PutType(e.ctx, store.TypeConfig{Type: "big", Priority: prio}, base)
		e.isErr(fmt.Sprintf("PutType with priority %d", prio), err, store.ErrInvalid)
	}
	_, err := e.s.GetType(e.ctx, "big")
	e.isErr("GetType after the refused PutType", err, store.ErrNotFound)
	_, err = e.s.PutType(e.ctx, store.TypeConfig{}, base)
	e.isErr("PutType without a name", err, store.ErrInvalid)
	for _, prio := range []int{1<<31 - 1, -1 << 31} {
		out, err := e.s.PutType(e.ctx, store.TypeConfig{Type: "edge", Priority: prio}, base)
		e.noErr(fmt.Sprintf("PutType with priority %d", prio), err)
		e.eq("priority returned", out.Priority, prio)
		got, err := e.s.GetType(e.ctx, "edge")
		e.noErr("GetType", err)
		e.eq("priority stored", got.Priority, prio)
	}
}
