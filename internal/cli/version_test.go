package cli

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestNodeVersionFromBuildInfo: the version a node records in the registry
// is the module version the binary was built from (go install
// ...@v1.4.0), else the commit it was built at, not "dev" for every
// binary: with "dev" on every row, `retryq nodes` could not tell which
// nodes an upgrade had reached. A version set at link time (-X) wins.
func TestNodeVersionFromBuildInfo(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, c := range []struct {
		name, linked string
		info         *debug.BuildInfo
		want         string
	}{
		{"module version", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"pseudo-version", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab"}}, "v0.0.0-20260101120000-0123456789ab"},
		{"checkout", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false")}, "dev-0123456789ab"},
		{"modified checkout", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.modified", "true")}, "dev-0123456789ab-dirty"},
		{"nothing known", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "dev", nil, "dev"},
		{"set at link time", "2.0.1", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "2.0.1"},
	} {
		if got := nodeVersion(c.linked, c.info); got != c.want {
			t.Errorf("%s: nodeVersion = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestWriteNodesShowsWholeBuildVersions: the VERSION column shows a
// pseudo-version whole, commit hash and "+dirty" included: cut at 20
// columns it showed only the date, which does not tell two builds apart.
func TestWriteNodesShowsWholeBuildVersions(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	const v = "v0.0.0-20261130125701-39d59ca478aa+dirty"
	var b strings.Builder
	writeNodes(&b, []apiNode{
		{ID: "a", Host: "h1", Version: v, Role: "leader", StartedAt: now.Add(-time.Hour), LastSeen: now, Alive: true},
	}, now)
	wantOutput(t, "nodes with a pseudo-version", b.String(), v)
}
