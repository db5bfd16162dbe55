//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
)

// TestWorkerReportsUntilALongPolledLeaseEnds: a task arrives ten seconds
// into the worker's long poll, its command finishes at once while the
// server is down, and the server is back eleven seconds later, within the
// 20s lease the task got when it arrived. The outcome is reported: the
// task succeeds after one attempt. The worker used to count the lease
// from the start of the long poll, gave up reporting ten seconds early,
// and the task went to the reaper (its attempt counted as expired).
func TestWorkerReportsUntilALongPolledLeaseEnds(t *testing.T) {
	dir := t.TempDir()
	rs, s, start := restartableServer(t, dir)
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Second, MaxDelay: time.Second, Jitter: retry.JitterNone, MaxAttempts: 3}
	if _, err := rs.eng.PutType(context.Background(), engine.TypeSpec{Type: "cli.longpoll", Policy: p}); err != nil {
		t.Fatal(err)
	}

	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `
touch "$OUT/started"
i=0
while [ ! -f "$OUT/release" ] && [ $i -lt 1200 ]; do sleep 0.02; i=$((i+1)); done
touch "$OUT/finished"
`)
	stderr := startWorkerProcess(t, dir, "--server", s.url, "--types", "cli.longpoll", "--exec", "sh "+handler,
		"--lease", "20s", "--worker-id", "longpoll-worker", "--grace", "5s")
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	}
	wait := func(d time.Duration) {
		end := time.Now().Add(d)
		pollUntil(t, d+time.Second, "time to pass", func() bool { return time.Now().After(end) }, diag)
	}

	// The worker's first long poll (it waits up to 20s) starts as it says
	// it is leasing; the task comes ten seconds into it.
	pollUntil(t, 20*time.Second, "the worker to start", func() bool { return strings.Contains(stderr.String(), "leasing") }, diag)
	wait(10 * time.Second)
	var task apiTask
	s.cliJSON(t, &task, "enqueue", "cli.longpoll", "--payload", `{}`)
	pollUntil(t, 10*time.Second, "the command to start", exists("started"), diag)
	leased := time.Now()

	// The server goes away before the first heartbeat (at a third of the
	// lease); the command then succeeds.
	rs.shutdown()
	writeTestFile(t, filepath.Join(dir, "release"), "")
	pollUntil(t, 10*time.Second, "the command to finish", exists("finished"), diag)
	// Back 11s after the lease began: past the long poll's start plus the
	// lease, well within the lease itself.
	wait(time.Until(leased.Add(11 * time.Second)))
	rs2 := start()
	s.rs = rs2
	pollUntil(t, 20*time.Second, "the task to leave running once the server is back", func() bool {
		s.cliJSON(t, &task, "tasks", "get", task.ID)
		return task.State != "running"
	}, diag)
	if task.State != "succeeded" || task.Attempt != 1 || len(task.Attempts) != 1 {
		t.Errorf("task after the server's restart: state %s, attempt %d, %d attempts (want succeeded after one)\n%s",
			task.State, task.Attempt, len(task.Attempts), diag())
	}
}
