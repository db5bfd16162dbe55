package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store/sqlite"
)

// TestServerDefaultsAreDocumented: the defaults "retryq server -h" and
// docs/operations.md state for the timings and retentions are the ones a
// server started without those flags runs with (the engine's, since the
// flags pass 0), so that neither text outlives a change of a default.
func TestServerDefaultsAreDocumented(t *testing.T) {
	clearServerEnv(t)
	var stdout strings.Builder
	env := &Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stdout, Getenv: func(string) string { return "" }}
	o, st := parseServer(env, []string{"--db", "sqlite:" + filepath.Join(t.TempDir(), "d.db")})
	if o == nil {
		t.Fatalf("server without flags: status %d\n%s", st, stdout.String())
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: strings.TrimPrefix(o.db, "sqlite:")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eng, err := engine.New(engine.Config{
		Store: db, LeaseDuration: o.lease, PollInterval: o.poll, LeaderTTL: o.leaderTTL,
		SucceededRetention: o.retention.succeeded, CancelledRetention: o.retention.cancelled,
		DeadRetention: o.retention.dead, NodeRetention: o.retention.nodes, MaxLongPolls: o.maxLongPolls,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := eng.Config()

	_, help, _ := runMain("server", "-h")
	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		flag string
		got  time.Duration
		// docs matches the flag's default in docs/operations.md.
		docs string
	}{
		{"lease", cfg.LeaseDuration, "`--lease` \\(in-process workers' lease, [^)]*default (\\S+)\\)"},
		{"poll-interval", cfg.PollInterval, "`--poll-interval` \\([^)]*default (\\S+)\\)"},
		{"leader-ttl", cfg.LeaderTTL, "`--leader-ttl` \\([^)]*default (\\S+)\\)"},
		{"succeeded-retention", cfg.SucceededRetention, "\\| `--succeeded-retention` \\| `(\\S+)` \\|"},
		{"dead-retention", cfg.DeadRetention, "\\| `--dead-retention` \\| `(\\S+)` \\|"},
		{"node-retention", cfg.NodeRetention, "\\| `--node-retention` \\| `(\\S+)` \\|"},
	} {
		m := regexp.MustCompile(`(?m)^  --` + d.flag + ` \S+\n\s+.*default ([0-9a-z.]+)`).FindStringSubmatch(help)
		if m == nil {
			t.Errorf("retryq server -h: no default for --%s in:\n%s", d.flag, help)
			continue
		}
		if v, err := parseRetention(m[1]); err != nil || v != d.got {
			t.Errorf("retryq server -h: --%s default %s (%v, %v); a server without the flag runs with %v", d.flag, m[1], v, err, d.got)
		}
		dm := regexp.MustCompile(d.docs).FindSubmatch(docs)
		if dm == nil {
			t.Errorf("docs/operations.md: no default for --%s", d.flag)
			continue
		}
		if v, err := parseRetention(strings.TrimSuffix(string(dm[1]), ";")); err != nil || v != d.got {
			t.Errorf("docs/operations.md: --%s default %s (%v, %v); a server without the flag runs with %v", d.flag, dm[1], v, err, d.got)
		}
	}
	// Cancelled tasks are kept as long as succeeded ones unless told.
	if cfg.CancelledRetention != cfg.SucceededRetention {
		t.Errorf("cancelled retention %v, succeeded %v: the help says the former defaults to the latter", cfg.CancelledRetention, cfg.SucceededRetention)
	}
	// The shutdown timeout is the server's own, not the engine's.
	if m := regexp.MustCompile(`(?m)^  --shutdown-timeout \S+\n\s+.*\(default (\S+)\)`).FindStringSubmatch(help); m == nil {
		t.Errorf("retryq server -h: no default for --shutdown-timeout in:\n%s", help)
	} else if v, err := parseDuration(m[1]); err != nil || v != o.shutdownTimeout {
		t.Errorf("retryq server -h: --shutdown-timeout default %s (%v, %v); a server without the flag runs with %v", m[1], v, err, o.shutdownTimeout)
	}
	if dm := regexp.MustCompile("`--shutdown-timeout` \\([^)]*default (\\S+?)[,;)]").FindSubmatch(docs); dm == nil {
		t.Errorf("docs/operations.md: no default for --shutdown-timeout")
	} else if v, err := parseDuration(string(dm[1])); err != nil || v != o.shutdownTimeout {
		t.Errorf("docs/operations.md: --shutdown-timeout default %s (%v, %v); a server without the flag runs with %v", dm[1], v, err, o.shutdownTimeout)
	}
	want := strconv.Itoa(cfg.MaxLongPolls)
	if m := regexp.MustCompile(`(?m)^  --max-long-polls int\n.*\(default (\d+)\)`).FindStringSubmatch(help); m == nil || m[1] != want {
		t.Errorf("retryq server -h: --max-long-polls default %q; a server without the flag runs with %s", m, want)
	}
	if !strings.Contains(string(docs), "`--max-long-polls` (default "+want+")") {
		t.Errorf("docs/operations.md: --max-long-polls default is not %s, the one a server without the flag runs with", want)
	}
}
