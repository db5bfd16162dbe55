package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestServerShutdownAnswersLongPolls: the server shuts down (as on
// SIGTERM) while a pull worker long-polls POST /v1/leases. The shutdown
// answers the poll at once with no tasks (it holds none) and returns
// promptly, logging no error. It used to wait out its 10 s bound, then
// close the engine and the database under the poll, which failed with 503.
func TestServerShutdownAnswersLongPolls(t *testing.T) {
	clearServerEnv(t)
	var logBuf syncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	path := filepath.Join(t.TempDir(), "rq.db")
	s, err := StartServer(context.Background(), env, []string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0", "--node-id", "solo"}, log)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		hc := &http.Client{Timeout: 60 * time.Second}
		resp, err := hc.Post("http://"+s.Addr()+"/v1/leases", "application/json",
			strings.NewReader(`{"worker_id":"w","types":["idle.type"],"wait_seconds":30}`))
		if err != nil {
			got <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{status: resp.StatusCode, body: string(b)}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.Engine().LongPolls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never started waiting")
		}
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	s.Shutdown()
	took := time.Since(start)
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("long poll never answered")
	}
	if r.err != nil || r.status != http.StatusOK || r.body != "{\"tasks\":[]}\n" {
		t.Errorf("long poll in flight at shutdown: status %d, body %q, err %v; want 200 with no tasks", r.status, r.body, r.err)
	}
	if took > 5*time.Second {
		t.Errorf("shutdown took %v with a long poll in flight", took)
	}
	if strings.Contains(logBuf.String(), "level=ERROR") || strings.Contains(logBuf.String(), "level=WARN") {
		t.Errorf("shutdown logged problems:\n%s", logBuf.String())
	}
}

// TestServerStoppedWhileStartingExitsZero: SIGTERM or SIGINT (here, the
// command's context) while the server still waits for its database ends
// it at once with status 0, as a stop at any later time does, and logs no
// error. It used to log "server failed to start" with the context's
// error and exit 1, so a supervisor's stop during a slow start read as a
// failure.
func TestServerStoppedWhileStartingExitsZero(t *testing.T) {
	clearServerEnv(t)
	// A "database" that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	s := launchServer(t, "server", "--db", "postgres://u@"+ln.Addr().String()+"/x", "--listen", "127.0.0.1:0")
	select {
	case c := <-accepted:
		accepted <- c // closed at the end
	case <-time.After(20 * time.Second):
		t.Fatalf("the server never connected to the database; log:\n%s", s.stderr.String())
	}
	s.cancel()
	if !s.wait(5 * time.Second) {
		t.Fatalf("the server did not stop within 5s of the signal; log:\n%s", s.stderr.String())
	}
	if s.status != exitOK || strings.Contains(s.stderr.String(), "level=ERROR") {
		t.Errorf("stopped while starting: status %d, want 0 and no error; log:\n%s", s.status, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), "stopped before it started") {
		t.Errorf("the log does not say the server stopped while starting:\n%s", s.stderr.String())
	}
}

// TestServerShutdownLeasesNoPushWorkDuringTheDrain: once the server begins
// to shut down it takes no new push work, even while the HTTP API still
// drains a slow request: a task that becomes due then stays pending, its
// attempt not counted, for another node (or the next start) to deliver.
// The push fetchers used to run until the drain ended (up to 10 s), leasing
// and delivering tasks the node was about to leave.
func TestServerShutdownLeasesNoPushWorkDuringTheDrain(t *testing.T) {
	clearServerEnv(t)
	delivered := make(chan string, 16)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered <- r.Header.Get(engine.HeaderTaskID)
	}))
	defer target.Close()
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	path := filepath.Join(t.TempDir(), "rq.db")
	s, err := StartServer(t.Context(), env, []string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0", "--node-id", "solo"},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	eng := s.Engine()
	if _, err := eng.PutType(t.Context(), engine.TypeSpec{Type: "hook", Target: &engine.Target{URL: target.URL}}); err != nil {
		t.Fatal(err)
	}
	enqueue := func() string {
		t.Helper()
		r, err := eng.Enqueue(t.Context(), engine.EnqueueRequest{Type: "hook"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Task.ID
	}
	// The pusher delivers while the server runs.
	first := enqueue()
	select {
	case id := <-delivered:
		if id != first {
			t.Fatalf("delivered %q, want %q", id, first)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running server never delivered the push task")
	}
	// A request whose body has not arrived keeps the HTTP drain going. With
	// "Expect: 100-continue" the server says when its handler starts
	// reading the body: the request is then surely in the server's hands.
	slow, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	body := `{"type":"x"}`
	if _, err := fmt.Fprintf(slow, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(slow)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the slow request's handler never read its body: %q, %v", line, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Shutdown()
	}()
	// The listener closes once the shutdown began.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener is still open after Shutdown began")
		}
	}
	second := enqueue()
	select {
	case id := <-delivered:
		t.Errorf("task %s delivered during the shutdown's HTTP drain", id)
	case <-time.After(3 * time.Second):
	case <-done:
		t.Fatal("the shutdown did not wait for the slow request")
	}
	if _, err := io.WriteString(slow, body); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the shutdown never finished")
	}
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tk, err := st.GetTask(t.Context(), second)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.Attempt != 0 {
		t.Errorf("task enqueued during the drain: state %s, attempt %d; want pending, none counted", tk.State, tk.Attempt)
	}
}
