package cli

import (
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
	if strings.Contains(out, "No alive node says it leads") {
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
	wantOutput(t, "nodes after the leader died", b.String(), "2m ago", "3s ago", "No alive node says it leads")
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
	if strings.Contains(out, "No alive node says it leads") {
		t.Errorf("nodes with one alive leader:\n%s", out)
	}
}
