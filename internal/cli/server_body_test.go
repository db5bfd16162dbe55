//go:build unix

package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/api"
	"github.com/retryq/retryq/internal/engine"
)

// TestServerCutsOffATricklingBody: `retryq server` answers a request
// whose body trickles in (a byte every 200 ms, never whole) with 408 and
// closes its connection within the API's 30 s body bound, while a
// normal client keeps being served and a long poll of the longest wait
// allowed (30 s, as long as the bound), whose body came at once, is not
// cut short by it. The server sets no ReadTimeout (it would end long
// polls): the bound is the API's per-request body deadline.
func TestServerCutsOffATricklingBody(t *testing.T) {
	clearServerEnv(t)
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	s, err := StartServer(t.Context(), env, []string{"--db", "sqlite:" + filepath.Join(t.TempDir(), "body.db"),
		"--listen", "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	const bound = api.DefaultBodyTimeout
	type answer struct {
		status int
		tasks  int
		took   time.Duration
		err    error
	}
	poll := make(chan answer, 1)
	go func() {
		start := time.Now()
		hc := &http.Client{Timeout: engine.MaxLeaseWait + 30*time.Second}
		body := fmt.Sprintf(`{"worker_id":"w","types":["idle.type"],"wait_seconds":%d}`, int(engine.MaxLeaseWait/time.Second))
		res, err := hc.Post("http://"+s.Addr()+"/v1/leases", "application/json", strings.NewReader(body))
		if err != nil {
			poll <- answer{err: err, took: time.Since(start)}
			return
		}
		defer res.Body.Close()
		var m struct{ Tasks []json.RawMessage }
		err = json.NewDecoder(res.Body).Decode(&m)
		poll <- answer{status: res.StatusCode, tasks: len(m.Tasks), took: time.Since(start), err: err}
	}()

	conn := dialT(t, s.Addr())
	if _, err := fmt.Fprintf(conn, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stopTrickle := make(chan struct{})
	defer close(stopTrickle)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for range 999 { // one byte short of the length declared
			select {
			case <-stopTrickle:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	// A normal client is served meanwhile.
	if st := getJSON(t, s.Addr(), "/healthz", nil); st != http.StatusOK {
		t.Errorf("GET /healthz beside the trickling body: status %d", st)
	}
	_ = conn.SetReadDeadline(time.Now().Add(bound + waitLimit))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the trickling body within %v: %v", bound+waitLimit, err)
	}
	took := time.Since(start)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("trickling body: status %d, want 408", res.StatusCode)
	}
	// Nothing earlier than the bound; later only by a loaded machine's delay.
	if took < bound-time.Second || took > bound+10*time.Second {
		t.Errorf("trickling body answered after %v, want about %v", took, bound)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the trickling body's connection is still open after its answer")
	}
	a := recvValue(t, poll, engine.MaxLeaseWait+30*time.Second, "the long poll's answer")
	if a.err != nil || a.status != http.StatusOK || a.tasks != 0 {
		t.Fatalf("long poll of %v: status %d, %d tasks, %v", engine.MaxLeaseWait, a.status, a.tasks, a.err)
	}
	if a.took < engine.MaxLeaseWait-time.Second {
		t.Errorf("long poll of %v answered after %v: cut short", engine.MaxLeaseWait, a.took)
	}
	if st := getJSON(t, s.Addr(), "/healthz", nil); st != http.StatusOK {
		t.Errorf("GET /healthz after: status %d", st)
	}
}
