package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCLINodes(t *testing.T) {
	s := startAPIServer(t, nil)
	// The node records itself when it starts, when it is elected, and every
	// few seconds.
	var js struct {
		Nodes []apiNode `json:"nodes"`
	}
	waitFor(t, "the node to show as leader", func() bool {
		s.cliJSON(t, &js, "nodes", "--since", "10m")
		return len(js.Nodes) == 1 && js.Nodes[0].Role == "leader"
	})
	if n := js.Nodes[0]; n.ID != "test-node" || !n.Alive || time.Since(n.LastSeen) > time.Minute || time.Since(n.StartedAt) > time.Minute {
		t.Errorf("nodes --json: %+v", js.Nodes)
	}
	out := s.cliOK(t, "nodes")
	wantOutput(t, "nodes", out, "ID", "HOST", "VERSION", "ROLE", "LAST SEEN", "ALIVE", "test-node", "leader", "yes")
	if strings.Contains(out, "No alive node") {
		t.Errorf("nodes with a leader:\n%s", out)
	}
	if out := s.cliOK(t, "nodes", "--since", "2999-01-01T00:00:00Z"); !strings.Contains(out, "no nodes seen in that time") {
		t.Errorf("nodes seen since the future:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nodes", "--since", "yesterday"}, `--since: want an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (24h), got "yesterday"`},
		{[]string{"nodes", "extra"}, `unexpected argument "extra"`},
	} {
		st, _, errOut := cli(t, "", append(c.args, "--server", s.url)...)
		if st != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("retryq %s: status %d, stderr %q; want %d and %q", strings.Join(c.args, " "), st, errOut, exitUsage, c.want)
		}
	}
}

func TestWriteNodesWithoutLeader(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	writeNodes(&b, []apiNode{
		{ID: "a", Host: "h1", Version: "v1", Role: "leader", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-2 * time.Minute)},
		{ID: "b", Host: "h2", Version: "v1", Role: "standby", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-3 * time.Second), Alive: true},
	}, now)
	wantOutput(t, "nodes after the leader died", b.String(), "2m ago", "3s ago", "No alive node holds the leadership")
}

// TestWriteNodesAfterCleanHandover: the old leader closed cleanly (role
// stopped, not alive though seen seconds ago) and the new one leads: one
// alive leader, no warning.
func TestWriteNodesAfterCleanHandover(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	writeNodes(&b, []apiNode{
		{ID: "a", Host: "h1", Version: "v1", Role: "stopped", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-2 * time.Second)},
		{ID: "b", Host: "h2", Version: "v1", Role: "leader", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Second), Alive: true},
	}, now)
	out := b.String()
	wantOutput(t, "nodes after a clean handover", out, "stopped", "leader", "no", "yes")
	if strings.Contains(out, "No alive node") {
		t.Errorf("nodes with one alive leader:\n%s", out)
	}
}

// TestWriteNodesWithoutSchedulerNodeSaysNoneCanLead: when every alive node
// runs with --no-scheduler (role worker), no standby will ever take the
// lease; the hint says so and what to do, instead of promising a standby.
func TestWriteNodesWithoutSchedulerNodeSaysNoneCanLead(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		nodes []apiNode
	}{
		{"only workers", []apiNode{
			{ID: "w1", Role: "worker", LastSeen: now.Add(-time.Second), Alive: true},
			{ID: "w2", Role: "worker", LastSeen: now.Add(-2 * time.Second), Alive: true},
		}},
		{"a stopped standby and a worker", []apiNode{
			{ID: "a", Role: "stopped", LastSeen: now.Add(-time.Minute)},
			{ID: "w", Role: "worker", LastSeen: now.Add(-time.Second), Alive: true},
		}},
		{"no node alive", []apiNode{
			{ID: "a", Role: "standby", LastSeen: now.Add(-5 * time.Minute)},
		}},
	} {
		var b strings.Builder
		writeNodes(&b, c.nodes, now)
		out := b.String()
		if !strings.Contains(out, "No alive node can lead") || !strings.Contains(out, "--no-scheduler") ||
			strings.Contains(out, "A standby takes") {
			t.Errorf("%s:\n%s", c.name, out)
		}
	}
}

// TestWriteNodesWithoutLeaderStatesTakeoverTime: with a standby alive, the
// hint gives the takeover time as docs/operations.md does (the leader TTL
// and a quarter of it, 12.5 s by default), not a number of its own.
func TestWriteNodesWithoutLeaderStatesTakeoverTime(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	writeNodes(&b, []apiNode{
		{ID: "a", Role: "standby", LastSeen: now.Add(-20 * time.Second), Alive: true},
		{ID: "b", Role: "standby", LastSeen: now.Add(-time.Second), Alive: true},
	}, now)
	out := b.String()
	wantOutput(t, "nodes without a leader", out, "No alive node holds the leadership", "--leader-ttl", "12.5 s")
	if strings.Contains(out, "15 seconds") || strings.Contains(out, "can lead") {
		t.Errorf("nodes without a leader, standbys alive:\n%s", out)
	}
}

// TestCLINodesJudgesLastSeenOnTheServersClock: LAST SEEN is the age of a
// heartbeat on the registry's clock (the answer's "now", the database's
// time on PostgreSQL), not on this machine's clock, which may be off from
// it. A server whose registry says 7 s since the heartbeat shows "7s ago"
// although the heartbeat is years old on this machine's clock; it used to
// show the years.
func TestCLINodesJudgesLastSeenOnTheServersClock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/nodes" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"now": "2020-01-01T00:00:07Z", "nodes": [{"id": "n1", "host": "h", "version": "v",
			"role": "leader", "started_at": "2019-12-31T00:00:00Z", "last_seen": "2020-01-01T00:00:00Z", "alive": true}]}`)
	}))
	defer srv.Close()
	st, out, errOut := cli(t, "", "nodes", "--server", srv.URL)
	if st != exitOK {
		t.Fatalf("nodes: status %d, stderr %s", st, errOut)
	}
	wantOutput(t, "nodes against the registry's clock", out, "n1", "7s ago")
}
