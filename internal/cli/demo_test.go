package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs "retryq demo" for 3 seconds with --db: it exits 0, prints
// progress every second and a summary with succeeded and dead counts and
// the dead-letter queue by reason, and leaves its data in the database.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	start := time.Now()
	st, out, errOut := cli(t, "", "demo", "--duration", "3s", "--rate", "50", "--db", db)
	t.Logf("demo took %v; output:\n%s", time.Since(start).Round(time.Millisecond), out)
	if st != 0 || errOut != "" {
		t.Fatalf("demo: status %d\nstderr: %s", st, errOut)
	}
	wantOutput(t, "demo", out, "retryq API    http://127.0.0.1:", "retryq dlq summary --server http://127.0.0.1:",
		"[  1s] enqueued", "[  2s] enqueued", "Summary after ", "150 tasks enqueued", "ai.summarize", "ai.embed", "TOTAL",
		"Dead-letter queue by reason:", "Simulated API:", "bad input (400)",
		"retryq server --db "+db)
	if !regexp.MustCompile(`ai\.embed +400 +non_retryable`).MatchString(out) {
		t.Errorf("no bad-input (400, non_retryable) group in the DLQ summary")
	}
	m := regexp.MustCompile(`succeeded (\d+), dead (\d+), still retrying (\d+)`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("want non-zero succeeded and dead counts, got %q", m)
	}
	// The data stays: a server on the same database sees the dead tasks.
	s := startAPIServer(t, func(o *serverOptions) { o.db = db })
	var sum apiDLQSummary
	s.cliJSON(t, &sum, "dlq", "summary")
	if sum.Total == 0 || !strings.Contains(s.cliOK(t, "dlq", "list", "--reason", "non_retryable"), "ai.embed") {
		t.Errorf("the demo's dead tasks are not in %s: %+v", db, sum)
	}
}

// TestDemoUnopenableDBIsAUsageError: a demo --db naming no database
// ("sqlite:" without a path) is a bad flag, exit 2, as for migrate and
// server; it was exit status 1 after starting to boot.
func TestDemoUnopenableDBIsAUsageError(t *testing.T) {
	clearServerEnv(t)
	for _, dsn := range []string{"sqlite:", "sqlite://"} {
		st, out, errOut := runMain("demo", "--db", dsn, "--duration", "1s")
		if st != exitUsage || out != "" || !strings.Contains(errOut, "--db") {
			t.Errorf("demo --db %q: status %d\nstdout: %q\nstderr: %q; want %d naming --db", dsn, st, out, errOut, exitUsage)
		}
	}
}

// TestDemoRefusesPublicListenWithoutNamingTokens: the demo has no token
// flags, so a --listen off loopback is refused saying it listens on
// loopback only, not advising --api-token, which the demo does not take.
func TestDemoRefusesPublicListenWithoutNamingTokens(t *testing.T) {
	clearServerEnv(t)
	for _, addr := range []string{"0.0.0.0:0", "[::]:7420"} {
		st, out, errOut := runMain("demo", "--listen", addr, "--duration", "1s")
		if st != exitUsage || out != "" || !strings.Contains(errOut, "--listen") || !strings.Contains(errOut, "loopback") ||
			strings.Contains(errOut, "api-token") || strings.Contains(errOut, "RETRYQ_API_TOKEN") {
			t.Errorf("demo --listen %s: status %d\nstdout: %q\nstderr: %q; want %d naming --listen and loopback, no token", addr, st, out, errOut, exitUsage)
		}
	}
	if st, _, errOut := runMain("demo", "--listen", "127.0.0.1", "--duration", "1s"); st != exitUsage || !strings.Contains(errOut, "--listen") {
		t.Errorf("demo --listen without a port: status %d, stderr %q; want %d naming --listen", st, errOut, exitUsage)
	}
}
