package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// demoLine matches a live progress line and the summary's last count line.
var (
	demoLine       = regexp.MustCompile(`(?m)^\[ *(\d+)s\] enqueued +(\d+) +succeeded +(\d+) +retrying +(\d+) +dead +(\d+) +in flight +(\d+) `)
	demoFinalLine  = regexp.MustCompile(`(?m)^succeeded (\d+), dead (\d+), still retrying (\d+), in flight (\d+)$`)
	demoEnqueued   = regexp.MustCompile(`Summary after [^:]+: (\d+) tasks enqueued, (\d+) attempts`)
	demoLeftover   = regexp.MustCompile(`plus the (\d+) it left unfinished`)
	demoRequests   = regexp.MustCompile(`Simulated API: (\d+) requests`)
	demoUnfinished = regexp.MustCompile(`The (\d+) unfinished tasks wait`)
)

// atoi parses a number the regexps above matched.
func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkDemoCounts checks the counts of a demo's output: in every progress
// line and in the summary, succeeded + retrying + dead + in flight is the
// number of tasks enqueued plus those an earlier run left unfinished, and
// the attempts are this run's (no more than the simulated API's requests
// and the attempts of the tasks found unfinished).
func checkDemoCounts(t *testing.T, run, out string) {
	t.Helper()
	leftover := 0
	if m := demoLeftover.FindStringSubmatch(out); m != nil {
		leftover = atoi(t, m[1])
	}
	lines := demoLine.FindAllStringSubmatch(out, -1)
	if len(lines) == 0 {
		t.Fatalf("%s: no progress lines:\n%s", run, out)
	}
	for _, m := range lines {
		enq, sum := atoi(t, m[2]), atoi(t, m[3])+atoi(t, m[4])+atoi(t, m[5])+atoi(t, m[6])
		if sum != enq+leftover {
			t.Errorf("%s: %q: succeeded+retrying+dead+in flight = %d, want %d enqueued + %d left unfinished before", run, m[0], sum, enq, leftover)
		}
	}
	e, f := demoEnqueued.FindStringSubmatch(out), demoFinalLine.FindStringSubmatch(out)
	r := demoRequests.FindStringSubmatch(out)
	if e == nil || f == nil || r == nil {
		t.Errorf("%s: no summary counts (enqueued %q, final line %q, requests %q)", run, e, f, r)
		return
	}
	if sum := atoi(t, f[1]) + atoi(t, f[2]) + atoi(t, f[3]) + atoi(t, f[4]); sum != atoi(t, e[1])+leftover {
		t.Errorf("%s: %q adds up to %d, want %s enqueued + %d left unfinished before", run, f[0], sum, e[1], leftover)
	}
	// Each attempt of this run is one request to its simulated API, but
	// for the unfinished tasks the run found: one of their attempts may
	// go to the previous run's address before the type is updated.
	if attempts, reqs := atoi(t, e[2]), atoi(t, r[1]); attempts > reqs+leftover {
		t.Errorf("%s: %d attempts, more than the %d requests to the simulated API (+%d left unfinished before)", run, attempts, reqs, leftover)
	}
}

// TestDemoAgainOnItsDatabase runs the demo twice on one --db, as its
// summary suggests: the second run's counts are its own (plus the
// unfinished tasks of the first it takes over), not the database's totals
// (its first line said "succeeded 73" with 20 tasks enqueued); its
// attempts and retry rate are its own, not the last hour's. After each
// run the pushed type keeps no push target: the simulated API is gone, so
// a "retryq server --db" run afterwards would deliver the unfinished tasks
// to a closed port and fill the dead-letter queue with connection_refused,
// which the simulated API never answered.
func TestDemoAgainOnItsDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	clearServerEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	// The first run's word on how many tasks it leaves unfinished is what
	// the second finds: it counted push deliveries still in flight, which
	// then finished (most of them succeeded) as the server stopped.
	left := 0
	for _, run := range []string{"first run", "second run"} {
		st, out, errOut := cli(t, "", "demo", "--duration", "2s", "--rate", "50", "--db", db)
		t.Logf("%s:\n%s", run, out)
		if st != 0 || errOut != "" {
			t.Fatalf("%s: status %d\nstderr: %s", run, st, errOut)
		}
		checkDemoCounts(t, run, out)
		if run == "second run" {
			if !strings.Contains(out, "Found 100 tasks of an earlier run in "+db) {
				t.Errorf("%s: the intro does not say the database held the first run's 100 tasks", run)
			}
			found := 0
			if m := demoLeftover.FindStringSubmatch(out); m != nil {
				found = atoi(t, m[1])
			}
			if found != left {
				t.Errorf("the first run said it left %d tasks unfinished; the second found %d", left, found)
			}
		}
		if m := demoUnfinished.FindStringSubmatch(out); m != nil {
			left = atoi(t, m[1])
		}
	}
	s := startAPIServer(t, func(o *serverOptions) { o.db = db })
	if out := s.cliOK(t, "types", "get", demoPushType); strings.Contains(out, "http://127.0.0.1:") {
		t.Errorf("after the demo %s still pushes to the simulated API:\n%s", demoPushType, out)
	}
}

// TestDemoInterruptedWhileStartingExitsZero: Ctrl-C (here, the command's
// context) while the demo still opens its database stops it with status
// 0, as a Ctrl-C at any later time does, leaves no temporary directory
// and reports no error. It printed "context canceled" and exited 1.
func TestDemoInterruptedWhileStartingExitsZero(t *testing.T) {
	clearServerEnv(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	st := Main(ctx, []string{"demo", "--duration", "1s"}, strings.NewReader(""), &out, &errOut)
	if st != exitOK || errOut.String() != "" || !strings.Contains(out.String(), "interrupted") {
		t.Errorf("interrupted while starting: status %d\nstdout: %q\nstderr: %q; want 0, saying interrupted, no error", st, out.String(), errOut.String())
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v", left)
	}
}
