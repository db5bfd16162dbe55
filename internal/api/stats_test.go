package api

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func TestStatsAndNodes(t *testing.T) { backendtest.Run(t, testStatsAndNodes) }

func testStatsAndNodes(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	e.must(http.StatusOK, "PUT", "/v1/types/s", map[string]any{"retry": map[string]any{"backoff": "fixed", "initial_delay_seconds": 0.01, "jitter": "none"}})
	e.enqueue(map[string]any{"type": "s"})
	e.enqueue(map[string]any{"type": "s"})
	e.enqueue(map[string]any{"type": "other", "delay_seconds": 60})
	// X fails and retries; Y (pending, so ahead of X's retry) dies; X's
	// second attempt succeeds: 3 attempts, 1 retry, 2 failures, 2 tasks.
	x := e.leaseOne("s", nil)
	e.must(http.StatusOK, "POST", "/v1/tasks/"+x["id"].(string)+"/fail", map[string]any{"lease_id": x["lease_id"], "error": map[string]any{"message": "x"}})
	y := e.leaseOne("s", nil)
	if y["id"] == x["id"] {
		t.Fatalf("retry leased before the pending task: %v", y)
	}
	e.must(http.StatusOK, "POST", "/v1/tasks/"+y["id"].(string)+"/fail", map[string]any{"lease_id": y["lease_id"], "error": map[string]any{"message": "x", "retryable": false}})
	x2 := e.leaseOne("s", nil)
	if x2["id"] != x["id"] || x2["attempt"] != 2.0 {
		t.Fatalf("second attempt = %v", x2)
	}
	e.must(http.StatusOK, "POST", "/v1/tasks/"+x2["id"].(string)+"/complete", map[string]any{"lease_id": x2["lease_id"]})
	s := e.must(http.StatusOK, "GET", "/v1/stats", nil).m
	o := s["overall"].(map[string]any)
	counts := o["counts"].(map[string]any)
	if s["window_seconds"] != 3600.0 || o["total"] != 3.0 || counts["scheduled"] != 1.0 || counts["succeeded"] != 1.0 ||
		len(counts) != 7 || o["attempts"] != 3.0 || o["retries"] != 1.0 || o["failures"] != 2.0 {
		t.Fatalf("stats = %v", s)
	}
	if rr := o["retry_rate"].(float64); rr < 0.33 || rr > 0.34 {
		t.Fatalf("retry_rate = %v", rr)
	}
	if m := o["mean_retries_per_task"].(float64); m != 0.5 {
		t.Fatalf("mean_retries_per_task = %v", m)
	}
	types := s["types"].([]any)
	if len(types) != 2 || types[1].(map[string]any)["type"] != "s" || types[1].(map[string]any)["dlq_size"] != 1.0 || o["dlq_size"] != 1.0 {
		t.Fatalf("types = %v", types)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "window", "GET", "/v1/stats?window=1", nil)
	if rd := o["retention_deleted"].(map[string]any); len(rd) != 3 || rd["succeeded"] != 0.0 || rd["cancelled"] != 0.0 || rd["dead"] != 0.0 {
		t.Fatalf("retention_deleted before any retention = %v", rd)
	}

	// Retention deletes the dead task and the succeeded one: both stay
	// counted in the stats, per type and overall.
	far := time.Now().Add(time.Hour)
	res, err := e.st.DeleteFinished(t.Context(), store.RetentionParams{SucceededBefore: far, DeadBefore: far})
	if err != nil || res.Dead != 1 || res.Succeeded != 1 {
		t.Fatalf("DeleteFinished = %+v, %v", res, err)
	}
	s = e.must(http.StatusOK, "GET", "/v1/stats", nil).m
	o = s["overall"].(map[string]any)
	want := map[string]any{"succeeded": 1.0, "cancelled": 0.0, "dead": 1.0}
	if rd := o["retention_deleted"].(map[string]any); !maps.Equal(rd, want) || o["dlq_size"] != 0.0 || o["total"] != 1.0 {
		t.Fatalf("stats after retention = %v", o)
	}
	types = s["types"].([]any)
	if len(types) != 2 || types[1].(map[string]any)["type"] != "s" || !maps.Equal(types[1].(map[string]any)["retention_deleted"].(map[string]any), want) {
		t.Fatalf("types after retention = %v", types)
	}

	var nodes []any
	waitFor(t, "the node to register", 10*time.Second, func() bool {
		nodes = e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any)
		return len(nodes) > 0
	})
	n := nodes[0].(map[string]any)
	if n["id"] != "test-node" || n["version"] != "test" || n["alive"] != true {
		t.Fatalf("node = %v", n)
	}
	mustTime(t, n["last_seen"])
	if ns := e.must(http.StatusOK, "GET", "/v1/nodes?since=2999-01-01T00:00:00Z", nil).m["nodes"].([]any); len(ns) != 0 {
		t.Fatalf("future nodes = %v", ns)
	}
	e.mustErr(http.StatusBadRequest, CodeInvalidField, "since", "GET", "/v1/nodes?since=now", nil)
}

// TestNodesStoppedNotAlive: a node that closed cleanly has just written its
// registry row (role "stopped"), and GET /v1/nodes reports it not alive,
// while the running node stays alive.
func TestNodesStoppedNotAlive(t *testing.T) { backendtest.Run(t, testNodesStoppedNotAlive) }

func testNodesStoppedNotAlive(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	other, err := engine.New(engine.Config{Store: e.st, NodeID: "gone", Version: "test", PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	nodes := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, n := range e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any) {
			out[n.(map[string]any)["id"].(string)] = n.(map[string]any)
		}
		return out
	}
	waitFor(t, "both nodes to register", 10*time.Second, func() bool {
		ns := nodes()
		return ns["gone"]["alive"] == true && ns["test-node"]["alive"] == true
	})
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	ns := nodes()
	if g := ns["gone"]; g["role"] != engine.RoleStopped || g["alive"] != false {
		t.Errorf("closed node = %v; want role stopped, not alive", g)
	}
	if n := ns["test-node"]; n["alive"] != true {
		t.Errorf("running node = %v; want alive", n)
	}
}

// skewedClock is real time shifted by a fixed offset: a node whose wall
// clock is wrong.
type skewedClock struct{ off time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.off) }

// TestNodesAliveOnDatabaseClock: on a shared database server a node's
// registry times are on the database's clock, as the leader lease's are, so
// a running node whose wall clock is minutes behind is still reported alive
// and seen "now", not as gone minutes ago.
func TestNodesAliveOnDatabaseClock(t *testing.T) {
	e := newEnv(t, envOpts{backend: backendtest.Postgres})
	other, err := engine.New(engine.Config{Store: e.st, NodeID: "slow-clock", Version: "test",
		Clock: skewedClock{off: -5 * time.Minute}, PollInterval: 50 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	var n map[string]any
	waitFor(t, "the node to register", 10*time.Second, func() bool {
		for _, x := range e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any) {
			if x.(map[string]any)["id"] == "slow-clock" {
				n = x.(map[string]any)
				return true
			}
		}
		return false
	})
	if n["alive"] != true {
		t.Fatalf("running node with a clock 5m behind = %v; want alive", n)
	}
	if seen := mustTime(t, n["last_seen"]); time.Since(seen).Abs() > time.Minute {
		t.Errorf("last_seen = %v, %v from now; want the database's time of its last heartbeat", seen, time.Since(seen))
	}
}

// TestNodesShowOnlyTheLeaseHolderAsLeader: a leader killed without closing
// (kill -9, a lost host) leaves its registry row saying "leader", seen
// moments ago; once another node holds the scheduler lease, GET /v1/nodes
// shows only that node as the leader. It used to show both as alive
// leaders for up to 30 s after the killed one's last heartbeat (17 s after
// a takeover with the default timings).
func TestNodesShowOnlyTheLeaseHolderAsLeader(t *testing.T) {
	backendtest.Run(t, testNodesShowOnlyTheLeaseHolderAsLeader)
}

func testNodesShowOnlyTheLeaseHolderAsLeader(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	nodes := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, n := range e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any) {
			out[n.(map[string]any)["id"].(string)] = n.(map[string]any)
		}
		return out
	}
	waitFor(t, "the node to lead and say so", 20*time.Second, func() bool {
		return e.eng.IsLeader() && nodes()["test-node"]["role"] == engine.RoleLeader
	})
	// The last row of a leader killed a moment ago, on the registry's clock.
	killed := store.Node{ID: "killed", Host: "h", Version: "test", Role: engine.RoleLeader,
		StartedAt: e.eng.RegistryNow(t.Context()).Add(-time.Hour)}
	if err := e.st.HeartbeatNode(t.Context(), killed, e.eng.RegistryNow(t.Context())); err != nil {
		t.Fatal(err)
	}
	ns := nodes()
	var leaders []string
	for id, n := range ns {
		if n["alive"] == true && n["role"] == engine.RoleLeader {
			leaders = append(leaders, id)
		}
	}
	if len(leaders) != 1 || leaders[0] != "test-node" {
		t.Errorf("alive leaders = %v, want only the lease holder test-node; nodes: %v", leaders, ns)
	}
	if k := ns["killed"]; k["role"] == engine.RoleLeader {
		t.Errorf("killed leader's row = %v; want it not shown as leader", k)
	}
}

// TestMeanRetriesPerTaskIsNullWithoutFirstAttempts: a window holding
// retries but no first attempt (every task in it was first tried earlier)
// has no mean to give: it is null, not 0, which read as "no retries" next
// to a retry rate of 100 %. A window holding neither has a mean of 0.
func TestMeanRetriesPerTaskIsNullWithoutFirstAttempts(t *testing.T) {
	for _, tc := range []struct {
		first, retries int
		want           string
	}{
		{0, 0, "0"},
		{0, 3, "null"},
		{2, 3, "1.5"},
	} {
		st := newStats("t")
		st.add(&store.TypeStats{Type: "t", FirstAttempts: tc.first, Retries: tc.retries})
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if got := string(m["mean_retries_per_task"]); got != tc.want {
			t.Errorf("%d first attempts, %d retries: mean_retries_per_task = %s, want %s", tc.first, tc.retries, got, tc.want)
		}
	}
}

// TestDateHeaderIsTheEnginesClock: every answer's Date header is the
// engine's time (on PostgreSQL corrected to the database server's), the
// clock the answer's times are on, not the API host's: the CLI judges ages
// and "--since 1h" against it. Here the engine's clock runs three hours
// ahead of the host's.
func TestDateHeaderIsTheEnginesClock(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.clock.Advance(3 * time.Hour)
	for _, path := range []string{"/healthz", "/v1/stats", "/v1/tasks/nope"} {
		r := e.do("GET", path, nil)
		d, err := http.ParseTime(r.header.Get("Date"))
		if err != nil {
			t.Fatalf("GET %s: Date %q: %v", path, r.header.Get("Date"), err)
		}
		if off := time.Until(d); off < 3*time.Hour-5*time.Second || off > 3*time.Hour+5*time.Second {
			t.Errorf("GET %s: Date %v is %v from the host's clock, want the engine's (3h ahead)", path, d, off)
		}
	}
}
