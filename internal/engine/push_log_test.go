package engine

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// logBuffer is an io.Writer for a slog handler that tests read while the
// engine writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPushLogsNeverShowTargetURLPassword: a target URL may carry basic-auth
// credentials (net/http sends them as an Authorization header), and keys in
// its query (?api_key=...), which are masked too. The log
// lines that name the target (active, updated, and each delivery at debug
// level) must show the URL with its password masked, as net/http's own
// error messages do, never the password itself.
func TestPushLogsNeverShowTargetURLPassword(t *testing.T) {
	backendtest.Run(t, testPushLogsNeverShowTargetURLPassword)
}

func testPushLogsNeverShowTargetURLPassword(t *testing.T, backend string) {
	const password = "s3cr3t-pw"
	var auth sync.Map
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		user, pw, ok := r.BasicAuth()
		auth.Store(r.Header.Get(HeaderTaskID), ok && user == "hook-user" && pw == password)
	})
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newPushEnvWith(t, backend, Config{Logger: log})
	const apiKey = "q-k3y-456"
	url := strings.Replace(srv.URL, "http://", "http://hook-user:"+password+"@", 1) + "/hook?api_key=" + apiKey + "&v=2"
	p.putType("push.creds", fastPolicy(3), Target{URL: url})
	id := p.enqueue("push.creds", `{}`)
	p.wait(id, store.StateSucceeded)
	if ok, _ := auth.Load(id); ok != true {
		t.Fatalf("the target did not receive the URL's credentials as basic auth")
	}
	p.putType("push.creds", fastPolicy(3), Target{URL: url, Concurrency: 2}) // logs "push target updated"
	waitFor(t, "the update to be logged", func() bool { return strings.Contains(logs.String(), "push target updated") })
	if err := p.e.Close(); err != nil {
		t.Fatal(err)
	}

	out := logs.String()
	for _, msg := range []string{"push target active", "push delivery started", "push target updated"} {
		if !strings.Contains(out, msg) {
			t.Errorf("no %q line in the log", msg)
		}
	}
	if strings.Contains(out, password) {
		t.Errorf("the log shows the target URL's password:\n%s", out)
	}
	if strings.Contains(out, apiKey) {
		t.Errorf("the log shows the target URL's query values:\n%s", out)
	}
	if !strings.Contains(out, "hook-user:xxxxx@") || !strings.Contains(out, "/hook?api_key=xxxxx&v=xxxxx") {
		t.Errorf("the log does not name the target with its password and query values masked:\n%s", out)
	}
}

// TestPushFailureMessagesNeverShowTargetURLSecrets: net/http names the
// request's URL in its errors, with the password masked but the query
// whole. A failed delivery's error message, kept in the task's history
// and last error (which read-only tokens see) and logged, must name the
// target with its query values masked, like the log lines and the
// read-only view of the type do, never the keys a webhook URL carries.
func TestPushFailureMessagesNeverShowTargetURLSecrets(t *testing.T) {
	backendtest.Run(t, testPushFailureMessagesNeverShowTargetURLSecrets)
}

func testPushFailureMessagesNeverShowTargetURLSecrets(t *testing.T, backend string) {
	const password, apiKey = "s3cr3t-pw", "q-k3y-789"
	hanging := target(t, func(w http.ResponseWriter, r *http.Request) { hang(r) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://hook-user:"+password+"@", 1) + "/hook?api_key=" + apiKey
	}
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newPushEnvWith(t, backend, Config{Logger: log})
	p.putType("push.refused", fastPolicy(1), Target{URL: withSecrets(refused)})
	p.putType("push.timeout", fastPolicy(1), Target{URL: withSecrets(hanging.URL), TimeoutSeconds: 0.3})
	for _, typ := range []string{"push.refused", "push.timeout"} {
		id := p.enqueue(typ, `{}`)
		tk := p.wait(id, store.StateDead)
		as := p.attempts(id)
		if len(as) != 1 || as[0].Error == nil || tk.LastError == nil {
			t.Fatalf("%s: history %+v, last error %+v; want one failed attempt", typ, as, tk.LastError)
		}
		for _, msg := range []string{as[0].Error.Message, tk.LastError.Message} {
			if strings.Contains(msg, apiKey) || strings.Contains(msg, password) {
				t.Errorf("%s: the error message shows the target URL's secrets: %q", typ, msg)
			}
			if !strings.Contains(msg, "/hook?api_key=xxxxx") {
				t.Errorf("%s: the error message %q does not name the target with its query masked", typ, msg)
			}
		}
	}
	if err := p.e.Close(); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, apiKey) || strings.Contains(out, password) {
		t.Errorf("the log shows the target URL's secrets:\n%s", out)
	}
}
