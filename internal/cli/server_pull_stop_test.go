//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// post sends a JSON POST to the server's API and returns the status and
// the body of the answer; a request that gets no answer (the listener
// closed) fails the test.
func (s *serverProcess) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v\n%s", path, err, s.diag())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leaseOne enqueues a task of typ and leases it over HTTP as worker
// "stop-worker" for a minute, returning its id and lease id.
func (s *serverProcess) leaseOne(t *testing.T, typ string) (id, lease string) {
	t.Helper()
	s.call(t, http.MethodPost, "/v1/tasks", `{"type":"`+typ+`"}`)
	st, body := s.post(t, "/v1/leases", `{"worker_id":"stop-worker","types":["`+typ+`"],"lease_seconds":60}`)
	var ans struct {
		Tasks []struct {
			ID      string `json:"id"`
			LeaseID string `json:"lease_id"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(body), &ans); st != http.StatusOK || err != nil || len(ans.Tasks) != 1 {
		t.Fatalf("lease: status %d, body %s, %v; want one task\n%s", st, body, err, s.diag())
	}
	return ans.Tasks[0].ID, ans.Tasks[0].LeaseID
}

// sigterm sends the server SIGTERM and waits for its "shutting down" line.
func (s *serverProcess) sigterm(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the server to begin its shutdown", func() bool {
		return strings.Contains(s.stderr.String(), "shutting down")
	}, s.diag)
}

// storedTask opens the SQLite database at path (the server has exited)
// and returns the task id.
func storedTask(t *testing.T, path, id string) store.Task {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tk, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestServerStopTakesPullWorkersReports: a pull worker leased a task from
// a node that then gets SIGTERM. While the node stops it is not ready
// (/readyz 503), refuses new leases (503 with Retry-After, so that workers
// do not spin on empty answers) and still takes the worker's heartbeat and
// its report: the task succeeds after one attempt, and the node exits 0
// as soon as the lease is reported, not at the end of its window. The
// node used to close its listener at once, so the report was refused and
// the task waited for its lease to expire, the attempt counted as
// lease_expired.
func TestServerStopTakesPullWorkersReports(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "stop.db")
	s := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--shutdown-timeout", "1m")
	id, lease := s.leaseOne(t, "pull.stop")
	s.sigterm(t)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.addr+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/readyz while the node waits for a report: %v\n%s", err, s.diag())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the node stops: %d, want 503", resp.StatusCode)
	}
	s.call(t, http.MethodPost, "/v1/tasks", `{"type":"pull.stop"}`)
	if st, body := s.post(t, "/v1/leases", `{"worker_id":"other","types":["pull.stop"],"wait_seconds":5}`); st != http.StatusServiceUnavailable ||
		!strings.Contains(body, "shutting down") {
		t.Errorf("lease while the node stops: %d %s, want 503 saying it shuts down", st, body)
	}
	if st, body := s.post(t, "/v1/leases/"+url.PathEscape(lease)+"/heartbeat", `{"lease_seconds":60}`); st != http.StatusOK {
		t.Errorf("heartbeat while the node stops: %d %s, want 200", st, body)
	}
	if st, body := s.post(t, "/v1/tasks/"+id+"/complete", `{"lease_id":"`+lease+`"}`); st != http.StatusOK {
		t.Errorf("complete while the node stops: %d %s, want 200", st, body)
	}
	reported := time.Now()
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not exit after the report\n%s", s.diag())
	}
	if took := time.Since(reported); took > 5*time.Second {
		t.Errorf("the server took %v to exit once the last lease was reported", took)
	}
	if s.waitErr != nil {
		t.Errorf("server exit: %v, want status 0\n%s", s.waitErr, s.diag())
	}
	if tk := storedTask(t, path, id); tk.State != store.StateSucceeded || tk.Attempt != 1 {
		t.Errorf("task reported while the node stopped: %s after %d attempts, want succeeded after 1\n%s", tk.State, tk.Attempt, s.diag())
	}
}

// TestServerStopWaitsForNoReportPastItsBound: a pull worker that never
// reports its lease does not hold the stop: the node serves its reports
// until a quarter of --shutdown-timeout before it ends, says how many
// leases were left unreported, and exits 0 within the timeout. The task
// stays leased, to come back when its lease expires.
func TestServerStopWaitsForNoReportPastItsBound(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "stop.db")
	s := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--shutdown-timeout", "4s")
	id, _ := s.leaseOne(t, "pull.silent")
	sent := time.Now()
	s.sigterm(t)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not exit with a lease never reported\n%s", s.diag())
	}
	// Status 0 says the stop ended within the timeout (runServer exits 1
	// at it); the time seen here adds the process's start of the stop
	// and its exit, slow on a loaded machine.
	if took := time.Since(sent); took > 7*time.Second {
		t.Errorf("the stop took %v with --shutdown-timeout 4s", took)
	}
	if s.waitErr != nil {
		t.Errorf("server exit: %v, want status 0\n%s", s.waitErr, s.diag())
	}
	if !strings.Contains(s.stderr.String(), "unreported") {
		t.Errorf("the log does not say a pull lease was left unreported\n%s", s.diag())
	}
	if tk := storedTask(t, path, id); tk.State != store.StateRunning || tk.Attempt != 1 {
		t.Errorf("task leased by a silent worker: %s after %d attempts, want still running its first", tk.State, tk.Attempt)
	}
}

// TestServerStopTakesRetryqWorkersOutcome: the same through "retryq
// worker": its command, running when the node gets SIGTERM, finishes after
// the signal, and its success is reported to the stopping node. The task
// succeeds after one attempt.
func TestServerStopTakesRetryqWorkersOutcome(t *testing.T) {
	clearServerEnv(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "stop.db")
	s := startServerProcess(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--shutdown-timeout", "1m")
	handler := filepath.Join(dir, "handler.sh")
	writeTestFile(t, handler, `touch "$OUT/started"; while [ ! -e "$OUT/release" ]; do sleep 0.02; done`)
	wlog := startWorkerProcess(t, dir, "--server", "http://"+s.addr, "--types", "pull.cmd", "--exec", "sh "+handler,
		"--worker-id", "stop-cmd-worker")
	diag := func() string { return s.diag() + "\nworker stderr:\n" + wlog.String() }
	s.call(t, http.MethodPost, "/v1/tasks", `{"type":"pull.cmd"}`)
	pollUntil(t, 20*time.Second, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	}, diag)
	s.sigterm(t)
	writeTestFile(t, filepath.Join(dir, "release"), "")
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not exit after the worker's report\n%s", diag())
	}
	if s.waitErr != nil {
		t.Errorf("server exit: %v, want status 0\n%s", s.waitErr, diag())
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tasks, _, err := st.ListTasks(context.Background(), store.ListParams{Type: "pull.cmd", Limit: 10})
	if err != nil || len(tasks) != 1 || tasks[0].State != store.StateSucceeded || tasks[0].Attempt != 1 {
		t.Errorf("task whose command finished as the node stopped: %+v, %v; want succeeded after 1 attempt\n%s", tasks, err, diag())
	}
}
