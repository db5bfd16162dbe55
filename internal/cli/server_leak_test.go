package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/leakcheck"
)

// TestServerRestartsLeakNothing starts and shuts down the server on one
// SQLite file many times, each time with a client's keep-alive connection
// left idle and a long poll waiting when the shutdown begins: afterwards
// the process holds no more goroutines nor descriptors (the listener, the
// database's files, connections) than after the first.
func TestServerRestartsLeakNothing(t *testing.T) {
	clearServerEnv(t)
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	log := slog.New(slog.DiscardHandler)
	path := filepath.Join(t.TempDir(), "rq.db")
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	round := func() {
		t.Helper()
		s, err := StartServer(context.Background(), env, []string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0", "--node-id", "leak"}, log)
		if err != nil {
			t.Fatal(err)
		}
		res, err := hc.Get("http://" + s.Addr() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close() // the connection stays open, idle
		polled := make(chan error, 1)
		go func() {
			res, err := hc.Post("http://"+s.Addr()+"/v1/leases", "application/json",
				strings.NewReader(`{"worker_id":"w","types":["idle.type"],"wait_seconds":30}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
			polled <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); s.Engine().LongPolls() == 0; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the long poll never started waiting")
			}
		}
		s.Shutdown()
		if err := <-polled; err != nil {
			t.Fatalf("long poll during the shutdown: %v", err)
		}
	}
	round()
	hc.CloseIdleConnections()
	base := leakcheck.Take(t)
	for range 20 {
		round()
	}
	hc.CloseIdleConnections()
	base.Settled(t, 10*time.Second, "20 server starts and shutdowns")
}
