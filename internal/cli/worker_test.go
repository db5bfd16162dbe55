//go:build linux

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
)

// postRaw POSTs a JSON body to the API and decodes the answer.
func postRaw(t *testing.T, url string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: %d %s: %v", url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// workerHandler is the --exec script of the worker test: it switches on
// the task type.
const workerHandler = `
case "$RETRYQ_TASK_TYPE" in
cli.ok)
	cat > "$OUT/payload-$RETRYQ_TASK_ID"
	echo "$RETRYQ_TASK_TYPE $RETRYQ_ATTEMPT" > "$OUT/env-$RETRYQ_TASK_ID"
	echo "processed $RETRYQ_TASK_ID" ;;
cli.flaky)
	echo "writing the report" >&2
	echo "disk full: cannot write /var/tmp/out" >&2
	echo "" >&2
	exit 1 ;;
cli.perm)
	echo "bad input: missing field to" >&2
	exit 64 ;;
cli.lease)
	exit 0 ;;
cli.slow)
	touch "$OUT/slow-started"
	i=0
	while [ ! -f "$OUT/slow-release" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
	[ -f "$OUT/slow-release" ] ;;
esac
`

// TestWorkerProcess runs "retryq worker --exec" as a second process against
// a server in this one: a command that succeeds (reading its payload on
// stdin), one that keeps failing (retried, then dead with its stderr line),
// one with a permanent exit code (dead after one attempt), a lease that was
// never heartbeated (it expires, the worker takes the task, and the stale
// lease's complete gets 409), and a graceful stop that lets a running
// command finish.
func TestWorkerProcess(t *testing.T) {
	s := startAPIServer(t, nil)
	ctx := context.Background()
	fast := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: 50 * time.Millisecond, MaxDelay: time.Second, Jitter: retry.JitterNone}
	for typ, attempts := range map[string]int{"cli.flaky": 2, "cli.lease": 3, "cli.perm": 5, "cli.ok": 5, "cli.slow": 5} {
		p := fast
		p.MaxAttempts = attempts
		if _, err := s.rs.eng.PutType(ctx, engine.TypeSpec{Type: typ, Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(typ, payload string) string {
		var task apiTask
		s.cliJSON(t, &task, "enqueue", typ, "--payload", payload)
		return task.ID
	}
	getTask := func(id string) apiTask {
		var task apiTask
		s.cliJSON(t, &task, "tasks", "get", id)
		return task
	}

	// A lease taken over HTTP and never heartbeated.
	leaseID := enqueue("cli.lease", `{"k":1}`)
	var la struct {
		Tasks []struct {
			ID      string `json:"id"`
			LeaseID string `json:"lease_id"`
		} `json:"tasks"`
	}
	if code := postRaw(t, s.url+"/v1/leases", map[string]any{"worker_id": "stale-worker", "types": []string{"cli.lease"},
		"lease_seconds": 1}, &la); code != 200 || len(la.Tasks) != 1 || la.Tasks[0].ID != leaseID {
		t.Fatalf("raw lease: %d %+v", code, la)
	}
	staleLease := la.Tasks[0].LeaseID

	// The worker process.
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, workerHandler)
	var stdout lockedBuffer
	proc := startCLIProcess(t, []string{"OUT=" + dir}, &stdout, "worker", "--server", s.url,
		"--types", "cli.ok,cli.flaky,cli.perm,cli.lease,cli.slow", "--exec", "sh "+handler, "--lease", "3s",
		"--permanent-exit", "2,64", "--worker-id", "proc-worker", "--concurrency", "4", "--grace", "20s")
	cmd, stderr, exited := proc.cmd, proc.stderr, proc.exited
	diag := func() string { return "worker stderr:\n" + stderr.String() }

	okID := enqueue("cli.ok", `{"msg": "hello", "n": 42}`)
	flakyID := enqueue("cli.flaky", `{}`)
	permID := enqueue("cli.perm", `{"to": null}`)
	final := func(id string) func() bool {
		return func() bool {
			st := getTask(id).State
			return st == "succeeded" || st == "dead"
		}
	}
	for _, id := range []string{okID, flakyID, permID, leaseID} {
		pollUntil(t, 30*time.Second, "task "+id+" to finish", final(id), diag)
	}

	// Success: the payload came on stdin, the task's variables in the environment.
	if task := getTask(okID); task.State != "succeeded" || task.Attempt != 1 {
		t.Errorf("ok task: %+v", task)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "payload-"+okID)); err != nil || strings.TrimSpace(string(b)) != `{"msg":"hello","n":42}` {
		t.Errorf("payload on stdin: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "env-"+okID)); err != nil || string(b) != "cli.ok 1\n" {
		t.Errorf("RETRYQ_TASK_TYPE and RETRYQ_ATTEMPT: %q, %v", b, err)
	}
	if !strings.Contains(stdout.String(), "processed "+okID) {
		t.Errorf("the command's stdout did not pass through: %q", stdout.String())
	}
	// Transient failures: retried by the server's policy, then dead with
	// the last stderr line as the message.
	flaky := getTask(flakyID)
	if flaky.State != "dead" || flaky.DeadReason != "max_attempts" || flaky.Attempt != 2 || len(flaky.Attempts) != 2 ||
		flaky.LastError == nil || flaky.LastError.Code != "exit:1" || flaky.LastError.Message != "disk full: cannot write /var/tmp/out" ||
		flaky.Attempts[0].WorkerID != "proc-worker" {
		t.Errorf("flaky task: %+v (last error %+v)", flaky, flaky.LastError)
	}
	// A permanent exit code: dead after one attempt.
	perm := getTask(permID)
	if perm.State != "dead" || perm.DeadReason != "non_retryable" || perm.Attempt != 1 ||
		perm.LastError == nil || perm.LastError.Code != "exit:64" || perm.LastError.Message != "bad input: missing field to" {
		t.Errorf("permanent task: %+v (last error %+v)", perm, perm.LastError)
	}
	// The unheartbeated lease expired; the worker ran the task; the stale
	// lease can no longer complete it.
	lt := getTask(leaseID)
	if lt.State != "succeeded" || len(lt.Attempts) != 2 || lt.Attempts[0].Outcome != "lease_expired" ||
		lt.Attempts[0].WorkerID != "stale-worker" || lt.Attempts[1].Outcome != "succeeded" || lt.Attempts[1].WorkerID != "proc-worker" {
		t.Errorf("expired-lease task: %+v", lt)
	}
	var lateErr struct {
		Error struct{ Code string } `json:"error"`
	}
	if code := postRaw(t, s.url+"/v1/tasks/"+leaseID+"/complete", map[string]string{"lease_id": staleLease}, &lateErr); code != 409 || lateErr.Error.Code != "lease_lost" {
		t.Errorf("late complete with the expired lease: %d %+v", code, lateErr)
	}
	if lt2 := getTask(leaseID); lt2.State != "succeeded" || len(lt2.Attempts) != 2 {
		t.Errorf("the late complete changed the task: %+v", lt2)
	}

	// Graceful stop: SIGTERM while a command runs; the worker stops leasing,
	// the command finishes and is reported, and the worker exits 0.
	slowID := enqueue("cli.slow", `{}`)
	pollUntil(t, 20*time.Second, "the slow command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "slow-started"))
		return err == nil
	}, diag)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the worker to acknowledge SIGTERM", func() bool {
		return strings.Contains(stderr.String(), "no new tasks; letting running commands finish")
	}, diag)
	afterStop := enqueue("cli.ok", `{"late": true}`)
	if st := getTask(slowID).State; st != "running" {
		t.Errorf("slow task after SIGTERM: %s", st)
	}
	writeTestFile(t, filepath.Join(dir, "slow-release"), "")
	select {
	case <-exited:
		if proc.waitErr != nil {
			t.Errorf("worker exit: %v\n%s", proc.waitErr, diag())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not exit after SIGTERM\n%s", diag())
	}
	if task := getTask(slowID); task.State != "succeeded" {
		t.Errorf("slow task after a graceful stop: %s\n%s", task.State, diag())
	}
	if task := getTask(afterStop); task.State != "pending" {
		t.Errorf("a task enqueued after SIGTERM was taken: %s", task.State)
	}
	wantOutput(t, "worker log", stderr.String(), "proc-worker leasing cli.ok,cli.flaky,cli.perm,cli.lease,cli.slow",
		"→ retry in", "→ dead (max_attempts)", "→ dead (non_retryable)", "succeeded in", "stopped")
}

// TestWorkerReportsThroughServerRestart: the server goes away while a
// task's command runs and comes back on the same address and database
// about ten seconds later. The command's success is reported once the
// server is back (its lease of 60s still holds): the task succeeds after
// one attempt. The worker used to give up reporting after about 7.5s, so
// the outcome was dropped, the task stayed running until its lease
// expired, and a task on its last attempt went dead although it succeeded.
func TestWorkerReportsThroughServerRestart(t *testing.T) {
	dir := t.TempDir()
	rs, s, start := restartableServer(t, dir)
	p := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Second, MaxDelay: time.Second, Jitter: retry.JitterNone, MaxAttempts: 1}
	if _, err := rs.eng.PutType(context.Background(), engine.TypeSpec{Type: "cli.restart", Policy: p}); err != nil {
		t.Fatal(err)
	}

	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `
touch "$OUT/started"
i=0
while [ ! -f "$OUT/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
touch "$OUT/finished"
[ -f "$OUT/release" ]
`)
	stderr := startWorkerProcess(t, dir, "--server", s.url, "--types", "cli.restart", "--exec", "sh "+handler,
		"--lease", "60s", "--worker-id", "restart-worker", "--grace", "5s")
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	}

	var task apiTask
	s.cliJSON(t, &task, "enqueue", "cli.restart", "--payload", `{}`)
	pollUntil(t, 20*time.Second, "the command to start", exists("started"), diag)

	// The server goes away; the command then succeeds.
	rs.shutdown()
	writeTestFile(t, filepath.Join(dir, "release"), "")
	pollUntil(t, 20*time.Second, "the command to finish", exists("finished"), diag)
	// An outage of 9s: longer than the 7.5s the worker used to retry for.
	outageEnd := time.Now().Add(9 * time.Second)
	pollUntil(t, 10*time.Second, "the outage to last 9s", func() bool { return time.Now().After(outageEnd) }, diag)

	rs2 := start()
	s.rs = rs2
	pollUntil(t, 20*time.Second, "the task to succeed once the server is back", func() bool {
		s.cliJSON(t, &task, "tasks", "get", task.ID)
		return task.State != "running"
	}, diag)
	if task.State != "succeeded" || task.Attempt != 1 || len(task.Attempts) != 1 || task.Attempts[0].WorkerID != "restart-worker" {
		t.Errorf("task after the server's restart: %+v\n%s", task, diag())
	}
}

// TestWorkerSurvivesClosedStdout: the worker's standard output is a pipe
// whose reader went away (a log shipper that died, "| head"). Commands
// writing to it must not kill the worker, which would leave its commands
// running unsupervised in their own process groups and their tasks'
// leases to expire: the output is dropped, the task succeeds, and the
// worker still stops cleanly on SIGTERM.
func TestWorkerSurvivesClosedStdout(t *testing.T) {
	s := startAPIServer(t, nil)
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `i=0; while [ $i -lt 2000 ]; do echo "line $i of a chatty command"; i=$((i+1)); done`)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr.Close() // nobody reads the worker's stdout
	defer pw.Close()
	proc := startCLIProcess(t, nil, pw, "worker", "--server", s.url, "--types", "cli.chatty", "--exec", "sh "+handler,
		"--worker-id", "chatty-worker", "--grace", "5s")
	cmd, exited := proc.cmd, proc.exited
	diag := func() string { return "worker stderr:\n" + proc.stderr.String() }

	var task apiTask
	s.cliJSON(t, &task, "enqueue", "cli.chatty")
	pollUntil(t, 20*time.Second, "the task to finish", func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		s.cliJSON(t, &task, "tasks", "get", task.ID)
		return task.State != "pending" && task.State != "running"
	}, diag)
	select {
	case <-exited:
		t.Fatalf("the worker died writing to a closed stdout: %v\n%s", proc.waitErr, diag())
	default:
	}
	if task.State != "succeeded" {
		t.Errorf("task with its output going nowhere: %+v", task)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if proc.waitErr != nil {
			t.Errorf("worker exit after SIGTERM: %v\n%s", proc.waitErr, diag())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not exit after SIGTERM\n%s", diag())
	}
}

// TestWorkerStopsCommandWhenLeaseRunsOutUnheartbeated: the server goes
// away while a task's command runs, so no heartbeat reaches it. Once the
// lease has run out (the reaper may give the task to another worker, and
// no outcome of this run can count), the command is stopped as for a lease
// the server says is lost, instead of running on beside its successor.
func TestWorkerStopsCommandWhenLeaseRunsOutUnheartbeated(t *testing.T) {
	// Stopped below to take it away from the worker: it waits for its
	// report for a moment only (see shutdown).
	s := startAPIServer(t, func(o *serverOptions) { o.shutdownTimeout = time.Second })
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `
trap 'touch "$OUT/stopped"; exit 143' TERM
touch "$OUT/started"
i=0
while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
touch "$OUT/ran-out"
`)
	stderr := startWorkerProcess(t, dir, "--server", s.url, "--types", "cli.partition", "--exec", "sh "+handler,
		"--lease", "2s", "--worker-id", "partitioned-worker", "--grace", "5s")
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	}

	s.cliOK(t, "enqueue", "cli.partition", "--payload", `{}`)
	pollUntil(t, 20*time.Second, "the command to start", exists("started"), diag)
	s.rs.shutdown() // no heartbeat gets through from now on
	// The lease of 2s ends at most 2s after the cut; the command is then
	// stopped within the worker's SIGTERM grace. The worker's log reaches
	// stderr through a pipe this process copies from, maybe after the
	// command's file: wait for its line too.
	pollUntil(t, 10*time.Second, "the command to be stopped once its lease ran out", func() bool {
		return exists("stopped")() && strings.Contains(stderr.String(), "lease ran out")
	}, diag)
	// Not at the first failed heartbeat: the worker tried again until the
	// lease ran out, and says why it stopped the command.
	out := stderr.String()
	failed, ranOut := strings.Index(out, "heartbeat failed"), strings.Index(out, "lease ran out")
	if failed < 0 || ranOut < failed {
		t.Errorf("want a failed heartbeat, then the lease running out, in the worker's log\n%s", diag())
	}
}

// startWorkerProcess runs `retryq worker args...` as a child process (this
// test binary) with OUT=dir in its environment and returns its standard
// error. It is stopped (SIGTERM, then after 20 s SIGKILL) when the test
// ends.
func startWorkerProcess(t *testing.T, dir string, args ...string) *lockedBuffer {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"worker"}, args...)...)
	cmd.Env = append(os.Environ(), "RETRYQ_TEST_CLI=1", "OUT="+dir, "RETRYQ_SERVER=", "RETRYQ_API_TOKEN=")
	stderr := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	startStoppedAtEnd(t, cmd)
	return stderr
}

// startStoppedAtEnd starts cmd, a retryq child process, and stops it when
// the test ends: SIGTERM, then SIGKILL if it has not exited 20 s later.
func startStoppedAtEnd(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
}

// TestWorkerStopsGracefullyOnHangup: a closed terminal or dropped SSH
// session (SIGHUP) stops the worker as SIGTERM does: no new tasks, the
// running command finishes and is reported, and the worker exits 0. The
// signal used to kill the worker outright, leaving its commands running
// unsupervised in their own process groups and their leases to expire.
func TestWorkerStopsGracefullyOnHangup(t *testing.T) {
	if len(hangupSignals) == 0 {
		t.Skip("no hangup signal on this system")
	}
	skipIfIgnored(t, syscall.SIGHUP) // under nohup the worker keeps it ignored, as asked
	s := startAPIServer(t, nil)
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `touch "`+dir+`/started"; i=0; while [ ! -e "`+dir+`/release" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`)
	proc := startCLIProcess(t, nil, nil, "worker", "--server", s.url, "--types", "cli.hup", "--exec", "sh "+handler,
		"--worker-id", "hup-worker", "--grace", "30s")
	// Registered after the kill, so it runs first: the command ends.
	t.Cleanup(func() { writeTestFile(t, filepath.Join(dir, "release"), "") })
	cmd, stderr, exited := proc.cmd, proc.stderr, proc.exited
	diag := func() string { return "worker stderr:\n" + stderr.String() }

	var task apiTask
	s.cliJSON(t, &task, "enqueue", "cli.hup")
	pollUntil(t, 20*time.Second, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	}, diag)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the worker to acknowledge SIGHUP", func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		return strings.Contains(stderr.String(), "no new tasks; letting running commands finish")
	}, diag)
	writeTestFile(t, filepath.Join(dir, "release"), "")
	select {
	case <-exited:
		if proc.waitErr != nil {
			t.Errorf("worker exit after SIGHUP: %v\n%s", proc.waitErr, diag())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not exit after SIGHUP\n%s", diag())
	}
	s.cliJSON(t, &task, "tasks", "get", task.ID)
	if task.State != "succeeded" {
		t.Errorf("task after a hangup: %s, want succeeded (the command finished and was reported)\n%s", task.State, diag())
	}
}

// restartableServer starts an in-process server on a SQLite file in dir,
// with the RETRYQ_* variables cleared. start starts it again on the same
// address and database once the first one is shut down: a port outside
// the ephemeral range (restartAddr), which no other connection takes
// meanwhile. Every server it starts is shut down when the test ends.
func restartableServer(t *testing.T, dir string) (rs *runningServer, s *apiServer, start func() *runningServer) {
	t.Helper()
	for _, k := range []string{"RETRYQ_SERVER", "RETRYQ_API_TOKEN", "RETRYQ_READ_TOKEN", "RETRYQ_DB", "RETRYQ_LISTEN"} {
		t.Setenv(k, "")
	}
	o := &serverOptions{
		db: "sqlite:" + filepath.Join(dir, "q.db"), listen: restartAddr(t), nodeID: "test-node",
		logFormat: "text", logLevel: "warn", maxBody: 1 << 20, poll: 100 * time.Millisecond,
		// The tests stop it to take it away from their workers: it waits
		// for their reports for a moment only (see shutdown).
		shutdownTimeout: time.Second,
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start = func() *runningServer {
		rs, err := listenAgain(t, func() (*runningServer, error) { return startServer(context.Background(), o, log) })
		if err != nil {
			t.Fatalf("start server on %s: %v", o.listen, err)
		}
		var once sync.Once
		t.Cleanup(func() { once.Do(rs.shutdown) })
		return rs
	}
	rs = start()
	o.listen = rs.addr // the restarted server takes the same address
	return rs, &apiServer{rs: rs, url: "http://" + rs.addr}, start
}
