package engine

import (
	"bytes"
	"log/slog"
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
