//go:build linux

package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServerAtTheFileLimitLogsThroughItsLogger: a server whose clients
// hold every file descriptor it may open logs the failed accepts through
// its own logger (JSON lines with --log-format json), backs off between
// them rather than spinning, and serves again once the connections close.
// net/http's accept errors used to go to the standard logger as plain
// text, which broke a JSON log.
func TestServerAtTheFileLimitLogsThroughItsLogger(t *testing.T) {
	// A cap on connections above the file limit: the default one (half
	// the limit) keeps the server from reaching it.
	addr, stderr := startAtFileLimit(t, "--max-connections", "1000")
	diag := func() string { return "server log:\n" + stderr.String() }
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 100 { // more than the server may open; the kernel queues the rest
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	pollUntil(t, 10*time.Second, "the server to fail an accept", func() bool {
		return strings.Contains(stderr.String(), "too many open files")
	}, diag)
	time.Sleep(2 * time.Second) // the window in which accepts keep failing
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	log := stderr.String()
	accepts := 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %s", line)
		}
		if strings.Contains(line, "too many open files") {
			accepts++
		}
	}
	// net/http waits 5 ms after the first failure, doubling up to 1 s.
	if accepts > 30 {
		t.Errorf("%d failed accepts logged in about 2 s: the accept loop spins\n%s", accepts, diag())
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	pollUntil(t, 15*time.Second, "the server to answer again", func() bool {
		res, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, diag)
}

// TestServerAtTheFileLimitDefaultCapKeepsAccepting: under a file limit
// of 64 the default --max-connections is 32, so 100 clients at once do not
// spend the server's descriptors: it never fails an accept, and serves
// them all, 32 at a time, the others waiting in the kernel's queue. Without
// a cap the server accepted connections up to the limit, failed the rest
// (logging each failure) and had no descriptor left for anything else.
func TestServerAtTheFileLimitDefaultCapKeepsAccepting(t *testing.T) {
	addr, stderr := startAtFileLimit(t)
	diag := func() string { return "server log:\n" + stderr.String() }
	if !strings.Contains(stderr.String(), `"max_connections":32`) {
		t.Fatalf("the start-up line does not give the default cap of 32 (half the limit of 64)\n%s", diag())
	}
	// The warning is logged after the start-up line, which is all that
	// startAtFileLimit waited for.
	pollUntil(t, 20*time.Second, "a warning that a cap of 32 connections is not above --max-long-polls (512)", func() bool {
		return strings.Contains(stderr.String(), "is not above --max-long-polls")
	}, diag)
	const clients = 100
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients { // all of them connected (or queued) before any asks
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	errs := make(chan error, clients)
	for _, c := range conns {
		go func() {
			defer c.Close()
			st, err := get(c, bufio.NewReader(c), "/healthz", 60*time.Second)
			if err == nil && st != http.StatusOK {
				err = fmt.Errorf("status %d", st)
			}
			errs <- err
		}()
	}
	for i := range clients {
		if err := recvValue(t, errs, 90*time.Second, "the clients' answers"); err != nil {
			t.Fatalf("client %d of %d: %v\n%s", i+1, clients, err, diag())
		}
	}
	if strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the server ran out of file descriptors under its default cap\n%s", diag())
	}
}

// startAtFileLimit starts `retryq server ARGS` as a child process whose
// file descriptor limit is 64, and returns its address and log (JSON).
func startAtFileLimit(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	clearServerEnv(t)
	// The shell's limit is the hard one too, so the Go runtime of the
	// child cannot raise it.
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -n 64 && exec "$0" "$@"`, os.Args[0],
		"server", "--db", "sqlite:" + filepath.Join(t.TempDir(), "fd.db"), "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "RETRYQ_TEST_CLI=1")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	startStoppedAtEnd(t, cmd)
	diag := func() string { return "server log:\n" + stderr.String() }
	var addr string
	pollUntil(t, 20*time.Second, "the server to start", func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "retryq server started" {
				addr, _ = m["listen"].(string)
			}
		}
		return addr != ""
	}, diag)
	return addr, stderr
}
