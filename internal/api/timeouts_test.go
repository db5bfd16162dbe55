package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
)

// TestStalledRequestBodyIsCutOff: a client that sends a request's headers
// and part of its body, then nothing more, is answered 408 and its
// connection closed once BodyTimeout has passed. It used to hold the
// connection and the handler's goroutine for as long as it stayed open.
func TestStalledRequestBodyIsCutOff(t *testing.T) {
	e := newEnv(t, envOpts{bodyTimeout: 200 * time.Millisecond})
	for _, path := range []string{"/v1/tasks", "/v1/leases", "/v1/tasks/nope/cancel"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// 10 of the 100 bytes promised.
			req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\":\"a"
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body within 5s (body timeout 200ms): %v", err)
			}
			res.Body.Close()
			if path != "/v1/tasks/nope/cancel" && res.StatusCode != http.StatusRequestTimeout {
				t.Errorf("stalled body: status %d, want 408", res.StatusCode)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("stalled body answered after %v", took)
			}
			// The connection is closed: its request was never read whole.
			buf := make([]byte, 1)
			if n, err := conn.Read(buf); err == nil {
				t.Errorf("connection still open after the stalled body (read %d bytes)", n)
			}
		})
	}
}

// TestLongPollOutlivesBodyTimeout: the body timeout bounds reading the
// body only; a long poll whose body arrived waits its whole wait_seconds
// even when that is longer than the body timeout.
func TestLongPollOutlivesBodyTimeout(t *testing.T) {
	e := newEnv(t, envOpts{bodyTimeout: 100 * time.Millisecond})
	start := time.Now()
	r := e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w", "types": []string{"idle.type"}, "wait_seconds": 1})
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("long poll of 1s answered after %v (%s): the body timeout cut it short", took, r.raw)
	}
	// The connection is reused for another request well after the
	// deadline: it must not carry the old deadline over.
	e.must(http.StatusCreated, "POST", "/v1/tasks", map[string]any{"type": "a.b", "payload": map[string]any{}})
}

// requestLog collects the API's debug lines (one per finished request).
type requestLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *requestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestUnreadResponseIsCutOff: a client that asks for a large answer (a
// list of tasks with big payloads) and never reads it has its connection
// closed once WriteTimeout passes without the answer moving on, which ends
// the handler. It used to hold the handler's goroutine, the answer in
// memory and the connection for as long as the client kept it open.
func TestUnreadResponseIsCutOff(t *testing.T) {
	var logs requestLog
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// 3 s per stretch: short enough to see the unread answer cut off,
	// long enough that the reading client below is not cut off too on a
	// loaded machine (-race, 2 cores, where decoding 8 MiB stalls the
	// reader for over a second).
	e := newEnv(t, envOpts{writeTimeout: 3 * time.Second, log: log})
	// One task with a payload of nearly 8 MiB, twice what the sockets can
	// buffer: a page holds at least one task whatever its size, so the
	// answer is that large although pages stop at 4 MiB of payloads.
	big := `"` + strings.Repeat("x", 8<<20-64) + `"`
	reqs := []engine.EnqueueRequest{{Type: "big.list", Payload: json.RawMessage(big)}}
	if _, err := e.eng.EnqueueMany(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	if _, err := conn.Write([]byte("GET /v1/tasks?type=big.list&limit=1000 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// The bound is generous: reading and encoding 8 MiB of payloads
	// takes seconds under -race on a loaded machine. Without the write
	// deadline the handler never ends while the client holds on.
	waitFor(t, "the unread answer's handler to end", 40*time.Second, func() bool {
		return strings.Contains(logs.String(), "method=GET path=/v1/tasks ")
	})
	// A client that reads gets the whole answer.
	r := e.must(http.StatusOK, "GET", "/v1/tasks?type=big.list&limit=1000", nil)
	if ts, _ := r.m["tasks"].([]any); len(ts) != 1 || len(r.raw) < 8<<20-64 {
		t.Fatalf("list read by a reading client: %d tasks in %d bytes, want the task and its whole payload", len(ts), len(r.raw))
	}
}
