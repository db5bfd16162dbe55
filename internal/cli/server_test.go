package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/pgtest"
)

// clearServerEnv unsets the environment the server and migrate commands
// read, so that the caller's shell cannot change what a test sees.
func clearServerEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"RETRYQ_DB", "RETRYQ_LISTEN", "RETRYQ_API_TOKEN", "RETRYQ_READ_TOKEN", "RETRYQ_SHUTDOWN_TIMEOUT"} {
		t.Setenv(k, "")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serverRun is `retryq server` running in-process on its own context.
type serverRun struct {
	cancel context.CancelFunc
	done   chan int // receives the exit status
	status int
	exited bool
	stderr *syncBuffer
	addr   string // the API's address, read from the start-up log line
}

var listenRE = regexp.MustCompile(`msg="retryq server started".* listen=(\S+)`)

// launchServer starts `retryq server ARGS` in-process. It does not wait.
func launchServer(t *testing.T, args ...string) *serverRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serverRun{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() {
		s.done <- Main(ctx, args, strings.NewReader(""), io.Discard, s.stderr)
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// wait waits up to d for the server to exit and reports whether it did.
func (s *serverRun) wait(d time.Duration) bool {
	if s.exited {
		return true
	}
	select {
	case s.status = <-s.done:
		s.exited = true
	case <-time.After(d):
	}
	return s.exited
}

// stop cancels the server's context and waits for it to exit.
func (s *serverRun) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	if !s.wait(30 * time.Second) {
		t.Errorf("server did not stop within 30s of its context being cancelled; log:\n%s", s.stderr.String())
	}
	return s.status
}

// started waits until the server logged its listen address and returns it.
func (s *serverRun) started(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 6000; i++ {
		if m := listenRE.FindStringSubmatch(s.stderr.String()); m != nil {
			s.addr = m[1]
			return s.addr
		}
		if s.wait(10 * time.Millisecond) {
			t.Fatalf("server exited with status %d before starting; log:\n%s", s.status, s.stderr.String())
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("server did not log its start within 60s; log:\n%s", s.stderr.String())
	return ""
}

// runServerToExit runs a server that is expected to refuse to start and
// returns its status and log.
func runServerToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	s := launchServer(t, args...)
	if !s.wait(60 * time.Second) {
		t.Fatalf("retryq %s did not exit within 60s; log:\n%s", strings.Join(args, " "), s.stderr.String())
	}
	return s.status, s.stderr.String()
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// getJSON GETs http://addr+path and decodes a JSON body into v (if not nil).
func getJSON(t *testing.T, addr, path string, v any) int {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", path, err)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: status %d, body %q: %v", path, resp.StatusCode, body, err)
		}
	}
	return resp.StatusCode
}

func checkHealthz(t *testing.T, addr string) {
	t.Helper()
	var h struct{ Status string }
	if code := getJSON(t, addr, "/healthz", &h); code != http.StatusOK || h.Status != "ok" {
		t.Errorf("GET %s/healthz: %d %+v", addr, code, h)
	}
	var r struct{ Status string }
	if code := getJSON(t, addr, "/readyz", &r); code != http.StatusOK || r.Status != "ready" {
		t.Errorf("GET %s/readyz: %d %+v", addr, code, r)
	}
}

// TestServerSQLite: `retryq server --db sqlite:PATH --listen 127.0.0.1:0`
// starts, answers /healthz and /readyz, and stops cleanly (status 0) when
// its context is cancelled.
func TestServerSQLite(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "q.db")
	s := launchServer(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--node-id", "solo")
	addr := s.started(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("server logged listen address %q", addr)
	}
	checkHealthz(t, addr)
	if st := s.stop(t); st != 0 {
		t.Errorf("server exited with status %d; log:\n%s", st, s.stderr.String())
	}
	if log := s.stderr.String(); !strings.Contains(log, "shutting down") {
		t.Errorf("no shutdown in the log:\n%s", log)
	}
}

// TestServerRefusesPublicListenWithoutTokens: without API tokens the server
// refuses any non-loopback address (usage error, status 2) and starts
// nothing; loopback names are accepted.
func TestServerRefusesPublicListenWithoutTokens(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "q.db")
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:7420"} {
		status, stdout, stderr := runMain("server", "--db", "sqlite:"+path, "--listen", listen)
		if status != 2 || !strings.Contains(stderr, "refusing to listen") || !strings.Contains(stderr, "--api-token") {
			t.Errorf("server --listen %s without tokens: status %d\nstdout: %s\nstderr: %s", listen, status, stdout, stderr)
		}
	}
	// The same refusal comes from RETRYQ_LISTEN.
	t.Setenv("RETRYQ_LISTEN", "0.0.0.0:0")
	if status, _, stderr := runMain("server", "--db", "sqlite:"+path); status != 2 || !strings.Contains(stderr, "refusing to listen") {
		t.Errorf("server with RETRYQ_LISTEN=0.0.0.0:0: status %d\nstderr: %s", status, stderr)
	}
}

// TestServerPostgresStandby: two servers on one PostgreSQL database both
// serve the API; one leads the scheduler and the other stands by, and when
// the leader shuts down cleanly the standby takes over at its next renewal.
func TestServerPostgresStandby(t *testing.T) {
	clearServerEnv(t)
	url := pgtest.URL(t)
	common := []string{"--db", url, "--listen", "127.0.0.1:0", "--leader-ttl", "2s"}
	a := launchServer(t, append([]string{"server", "--node-id", "srv-a"}, common...)...)
	addrA := a.started(t)
	b := launchServer(t, append([]string{"server", "--node-id", "srv-b"}, common...)...)
	addrB := b.started(t)
	checkHealthz(t, addrA)
	checkHealthz(t, addrB)

	// Both register; exactly one leads (roles refresh every 5s).
	roles := func(addr string) map[string]string {
		var body struct {
			Nodes []struct {
				ID, Role string
				Alive    bool
			}
		}
		if code := getJSON(t, addr, "/v1/nodes", &body); code != http.StatusOK {
			t.Fatalf("GET /v1/nodes: %d", code)
		}
		out := map[string]string{}
		for _, n := range body.Nodes {
			if n.Alive {
				out[n.ID] = n.Role
			}
		}
		return out
	}
	var got map[string]string
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		got = roles(addrB)
		if (got["srv-a"] == "leader" && got["srv-b"] == "standby") || (got["srv-a"] == "standby" && got["srv-b"] == "leader") {
			break
		}
		if time.Now().After(deadline) || i > 400 {
			t.Fatalf("want one leader and one standby, registry says %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	leader, standby, standbyAddr := a, b, addrB
	standbyID := "srv-b"
	if got["srv-b"] == "leader" {
		leader, standby, standbyAddr, standbyID = b, a, addrA, "srv-a"
	}

	// A clean shutdown releases the lease; the standby takes it within one
	// renewal interval (TTL/4 = 0.5s), well inside the TTL.
	if st := leader.stop(t); st != 0 {
		t.Errorf("leader exited with status %d", st)
	}
	stopped := time.Now()
	deadline = time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		conn, err := pgx.Connect(ctx, url)
		var holder string
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT node_id FROM leader WHERE name = 'scheduler' AND expires_at > now()").Scan(&holder)
			conn.Close(context.Background())
		}
		cancel()
		if engine.LeaseHolderNode(holder) == standbyID {
			t.Logf("standby %s took the lead %s after the leader stopped", standbyID, time.Since(stopped).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) || i > 200 {
			t.Fatalf("standby %s did not take the lead within 10s (holder %q, err %v)", standbyID, holder, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkHealthz(t, standbyAddr)
	if st := standby.stop(t); st != 0 {
		t.Errorf("standby exited with status %d", st)
	}
}
