package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// leasedHook is a slog.Handler for the engine that runs a function at its
// "task leased" debug line: the moment Lease hands tasks to the API, after
// its own check that the caller is still there. It drops every line.
type leasedHook struct {
	once *sync.Once
	f    func()
}

func (h leasedHook) Enabled(context.Context, slog.Level) bool { return true }
func (h leasedHook) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h leasedHook) WithGroup(string) slog.Handler            { return h }
func (h leasedHook) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "task leased" {
		h.once.Do(h.f)
	}
	return nil
}

// connCancels lets a test cancel the server side of one connection (as
// net/http does when it reads the client's close) at the moment it
// chooses, rather than whenever the server gets to read the close.
type connCancels struct {
	mu sync.Mutex
	m  map[string]context.CancelFunc // by the client's address
}

func (c *connCancels) connContext(ctx context.Context, conn net.Conn) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]context.CancelFunc)
	}
	c.m[conn.RemoteAddr().String()] = cancel
	return ctx
}

func (c *connCancels) cancel(client net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.m[client.LocalAddr().String()]; f != nil {
		f()
	}
}

// TestLeaseAnswerToAGoneClientReleasesTasks: a worker whose long poll is
// answered just as it hangs up (its connection closed, its request
// cancelled, as a client timing out its own request does) never gets the
// tasks leased for it: they are pending again at once, their attempt not
// counted and their priority kept, rather than leased to no one until the
// lease (600 s here) expires, and the lease id the answer would have
// carried is lost (409 lease_lost). Before, the engine released only tasks
// whose caller was gone when its fetch returned; one that left after that
// and before the answer was written was answered into a closed connection.
func TestLeaseAnswerToAGoneClientReleasesTasks(t *testing.T) {
	var cc connCancels
	// The hook runs on the server's goroutine: it is handed the client's
	// connection and the store through a channel.
	type gone struct {
		client net.Conn
		st     store.Store
	}
	handoff := make(chan gone, 1)
	var token string // the lease id of the answer that was not delivered
	leased := make(chan struct{})
	hook := func() {
		g := <-handoff
		// The client hangs up just as its task is leased.
		_ = g.client.Close()
		cc.cancel(g.client)
		ts, _, err := g.st.ListTasks(context.Background(), store.ListParams{Type: "gone.lease", Limit: 10})
		if err == nil && len(ts) == 1 && ts[0].State == store.StateRunning {
			token = ts[0].ID + "." + ts[0].LeaseID
		}
		close(leased)
	}
	e := newEnv(t, envOpts{engineLog: slog.New(leasedHook{once: new(sync.Once), f: hook}), connContext: cc.connContext})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	handoff <- gone{client: conn, st: e.st}
	body := `{"worker_id":"gone","types":["gone.lease"],"wait_seconds":10,"lease_seconds":600}`
	req := fmt.Sprintf("POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(map[string]any{"type": "gone.lease", "priority": 7})["id"].(string)
	select {
	case <-leased:
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not leased to the waiting request within 10s")
	}
	if token == "" {
		t.Fatal("the task leased to the request was not found running")
	}
	var tk store.Task
	waitFor(t, "the task leased for the gone client to be pending again (its lease is 600s)", 5*time.Second, func() bool {
		tk, err = e.st.GetTask(context.Background(), id)
		return err == nil && tk.State == store.StatePending
	})
	if tk.Attempt != 0 || tk.LeaseID != "" || tk.Priority != 7 || tk.EffectivePrio != 7 {
		t.Fatalf("released task: attempt %d, lease %q, priority %d/%d; want attempt 0, no lease, priority 7/7",
			tk.Attempt, tk.LeaseID, tk.Priority, tk.EffectivePrio)
	}
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": token})
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/leases/"+token+"/heartbeat", nil)
	if l := e.leaseOne("gone.lease", nil); l["id"] != id || l["attempt"] != 1.0 {
		t.Fatalf("the next worker's lease: %v; want the task as its first attempt", l)
	}
}

// brokenWriter is a connection the client reset: an answer is taken into
// the server's buffer, and sending it fails.
type brokenWriter struct {
	h    http.Header
	code int
	buf  bytes.Buffer
}

func (w *brokenWriter) Header() http.Header         { return w.h }
func (w *brokenWriter) WriteHeader(code int)        { w.code = code }
func (w *brokenWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *brokenWriter) FlushError() error           { return fmt.Errorf("write tcp: %w", syscall.ECONNRESET) }

// TestLeaseAnswerThatFailsToSendReleasesTasks: when the lease answer
// cannot be sent (the connection was reset), its tasks are released at
// once, attempt not counted, before the handler returns, and its lease ids
// are lost. The answer was left in the connection's buffer, its failure
// unseen, and the tasks stayed leased until their leases expired.
func TestLeaseAnswerThatFailsToSendReleasesTasks(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.enqueue(map[string]any{"type": "reset.lease"})["id"].(string)
	req := httptest.NewRequest("POST", "/v1/leases",
		strings.NewReader(`{"worker_id":"reset","types":["reset.lease"],"lease_seconds":600}`))
	req.Header.Set("Content-Type", "application/json")
	w := &brokenWriter{h: make(http.Header)}
	e.srv.ServeHTTP(w, req)
	var ans struct {
		Tasks []struct {
			LeaseID string `json:"lease_id"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(w.buf.Bytes(), &ans); err != nil || len(ans.Tasks) != 1 {
		t.Fatalf("answer written: %d %q (%v); want the leased task", w.code, w.buf.String(), err)
	}
	tk, err := e.st.GetTask(context.Background(), id)
	if err != nil || tk.State != store.StatePending || tk.Attempt != 0 || tk.LeaseID != "" {
		t.Fatalf("after the answer failed to send: %s attempt %d lease %q (%v); want pending, attempt 0, no lease",
			tk.State, tk.Attempt, tk.LeaseID, err)
	}
	e.mustErr(http.StatusConflict, CodeLeaseLost, "", "POST", "/v1/tasks/"+id+"/complete",
		map[string]any{"lease_id": ans.Tasks[0].LeaseID})
}
