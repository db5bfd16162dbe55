//go:build linux

package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// setChildFileSizeLimit sets the RLIMIT_FSIZE soft limit of the running
// process pid (prlimit(2)), keeping the hard limit this process has.
func setChildFileSizeLimit(pid int, n uint64) error {
	var own syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &own); err != nil {
		return err
	}
	lim := syscall.Rlimit{Cur: min(n, own.Max), Max: own.Max}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// TestServerOnAFullDisk: a retryq server whose SQLite files reach their
// size limit (RLIMIT_FSIZE set on the running process, as a full disk or
// quota would refuse them; Go ignores the SIGXFSZ that comes with it)
// keeps running, refuses enqueues with 503 storage_full naming the cause,
// answers /readyz 503 saying why, and logs the transition once each, not
// a line per request; `retryq enqueue` says the storage is full; tasks
// committed before are all there; and once the limit is raised enqueues
// and readiness come back on their own, each logged once.
func TestServerOnAFullDisk(t *testing.T) {
	clearServerEnv(t)
	s := startServerProcess(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0")
	pid := s.cmd.Process.Pid
	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, s.diag())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var ids []string
	for range 5 {
		code, body := do("POST", "/v1/tasks", `{"type":"t","payload":{"n":1}}`)
		var task struct{ ID string }
		if code != http.StatusCreated || json.Unmarshal([]byte(body), &task) != nil {
			t.Fatalf("enqueue: %d %s", code, body)
		}
		ids = append(ids, task.ID)
	}
	// The WAL is already larger: its next frame lies past the limit.
	if err := setChildFileSizeLimit(pid, 64<<10); err != nil {
		t.Skipf("cannot set the server's RLIMIT_FSIZE: %v", err)
	}
	pad := `{"type":"t","payload":{"p":"` + strings.Repeat("x", 3000) + `"}}`
	var code int
	var body string
	for range 50 {
		if code, body = do("POST", "/v1/tasks", pad); code != http.StatusCreated {
			break
		}
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"storage_full"`) || !strings.Contains(body, "storage is full") {
		t.Fatalf("enqueue past the file size limit: %d %s, want 503 storage_full\n%s", code, body, s.diag())
	}
	for range 10 { // every request fails alike; the log says so once
		do("POST", "/v1/tasks", pad)
	}
	pollUntil(t, 15*time.Second, "/readyz to say the storage is full", func() bool {
		code, body := do("GET", "/readyz", "")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "storage is full")
	}, s.diag)
	for range 5 {
		do("GET", "/readyz", "")
	}
	st, _, errOut := cli(t, "", "enqueue", "t", "--payload", `{"p":"`+strings.Repeat("x", 3000)+`"}`, "--server", "http://"+s.addr)
	if st == 0 || !strings.Contains(errOut, "storage is full") {
		t.Errorf("retryq enqueue on a full disk: status %d, stderr %q; want a failure naming the full storage", st, errOut)
	}
	select {
	case <-s.exited:
		t.Fatalf("the server exited on a full disk: %v\n%s", s.waitErr, s.diag())
	default:
	}
	log := s.stderr.String()
	if n := strings.Count(log, "api: database storage full"); n != 1 {
		t.Errorf("the API logged the full storage %d times, want once\n%s", n, log)
	}
	if n := strings.Count(log, `msg="not ready"`); n != 1 {
		t.Errorf("/readyz logged not ready %d times, want once\n%s", n, log)
	}

	if err := setChildFileSizeLimit(pid, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 15*time.Second, "an enqueue to succeed again", func() bool {
		code, _ := do("POST", "/v1/tasks", pad)
		return code == http.StatusCreated
	}, s.diag)
	pollUntil(t, 15*time.Second, "/readyz to say ready again", func() bool {
		code, _ := do("GET", "/readyz", "")
		return code == http.StatusOK
	}, s.diag)
	for _, id := range ids {
		if code, body := do("GET", "/v1/tasks/"+id, ""); code != http.StatusOK {
			t.Errorf("task %s committed before the disk was full: %d %s", id, code, body)
		}
	}
	log = s.stderr.String()
	for _, want := range []string{"api: database available again", `msg="ready again"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q once space is back\n%s", want, log)
		}
	}
	t.Logf("%s", s.diag())
}
