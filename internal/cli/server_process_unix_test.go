//go:build unix

package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// hangingPushTarget starts a push target that answers no request until the
// test ends (or the request is cancelled), and reports that a request
// arrived on the channel it returns (one report kept).
func hangingPushTarget(t *testing.T) (url string, received <-chan struct{}) {
	t.Helper()
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(target.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return
	return target.URL, got
}

// serverProcess is "retryq server" run as a child process.
type serverProcess struct {
	*cliProcess
	addr string // the API's address, read from the start-up log line
}

// startServerProcess runs "retryq server args..." as a child process and
// waits (20 s at most) for its start-up log line; the test fails if the
// server exits first.
func startServerProcess(t *testing.T, args ...string) *serverProcess {
	t.Helper()
	s := &serverProcess{cliProcess: startCLIProcess(t, nil, nil, append([]string{"server"}, args...)...)}
	pollUntil(t, 20*time.Second, "the server to start", func() bool {
		select {
		case <-s.exited:
			t.Fatalf("the server exited: %v\n%s", s.waitErr, s.diag())
		default:
		}
		m := listenRE.FindStringSubmatch(s.stderr.String())
		if m != nil {
			s.addr = m[1]
		}
		return m != nil
	}, s.diag)
	return s
}

// diag returns the server's log so far, for a failure message.
func (s *serverProcess) diag() string { return "server log:\n" + s.stderr.String() }

// call sends a JSON request to the server's API and fails the test unless
// it is answered 2xx.
func (s *serverProcess) call(t *testing.T, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: status %d\n%s", method, path, resp.StatusCode, s.diag())
	}
}

// deliverToHangingTarget stores the type "hook" with a push target that
// answers nothing (hangingPushTarget; extra adds target fields, such as
// `"timeout_seconds":600`), enqueues one task of it and waits (20 s at
// most) until its delivery reaches the target.
func (s *serverProcess) deliverToHangingTarget(t *testing.T, extra string) {
	t.Helper()
	url, received := hangingPushTarget(t)
	target := `{"url":"` + url + `"`
	if extra != "" {
		target += "," + extra
	}
	s.call(t, http.MethodPut, "/v1/types/hook", `{"target":`+target+`}}`)
	s.call(t, http.MethodPost, "/v1/tasks", `{"type":"hook"}`)
	select {
	case <-received:
	case <-time.After(20 * time.Second):
		t.Fatalf("the push delivery never reached the target\n%s", s.diag())
	}
}
