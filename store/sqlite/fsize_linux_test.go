//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// ownProcessEnv marks the child process inOwnProcess starts.
const ownProcessEnv = "RETRYQ_TEST_OWN_PROCESS"

// inOwnProcess runs the calling test again in a child process of its own
// (this test binary, that test alone), reports the child's output and
// result, and returns true: the caller then returns at once. In that child
// it returns false, and the caller goes on: it may change limits of the
// whole process (setrlimit) without touching the other tests.
func inOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) != "" {
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ownProcessEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a process of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the test failed in a process of its own: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skip("skipped in a process of its own (see its output)")
	}
	return true
}

// rlimInfinity is RLIM_INFINITY as a limit of syscall.Rlimit.
const rlimInfinity = ^uint64(0)

// setFileSizeLimit sets this process's RLIMIT_FSIZE soft limit (the hard
// limit stays as it is), or skips the test when it may not.
func setFileSizeLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("cannot read RLIMIT_FSIZE: %v", err)
	}
	if lim.Max != rlimInfinity && n > lim.Max {
		t.Skipf("RLIMIT_FSIZE's hard limit %d is below %d", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("cannot set RLIMIT_FSIZE: %v", err)
	}
}

// checkpointedSize moves the WAL's pages into the database file at path
// and returns the file's size: the size a file size limit is set from.
func checkpointedSize(t *testing.T, s *Store, path string) int64 {
	t.Helper()
	if _, err := s.w.ExecContext(t.Context(), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestFileSizeLimitIsDiskFull: a write past the process's file size limit
// (RLIMIT_FSIZE) fails with EFBIG, which SQLite reports as a plain disk
// I/O error (SQLITE_IOERR_WRITE), not SQLITE_FULL; a file system's own
// largest file size and quotas fail the same way. The insert must fail
// with ErrUnavailable and ErrDiskFull naming the limit, Ping must say not
// ready, nothing committed before may be lost, and once the limit is
// raised writes and readiness come back on their own. Before, the error
// was ErrUnavailable alone ("disk I/O error"), which the API answered with
// its generic 503, and Ping said ready while every insert failed.
func TestFileSizeLimitIsDiskFull(t *testing.T) {
	if inOwnProcess(t) {
		return
	}
	// Go ignores SIGXFSZ (it installs a handler that does nothing): a
	// write past the limit fails with EFBIG instead of killing the process.
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	s := openFile(t, path)
	now := time.Now()
	var before []string
	for i := range 20 {
		id := fmt.Sprintf("before_%02d", i)
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now,
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: []byte(`{"n":1}`)}}}); err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}
	size := checkpointedSize(t, s, path)
	// Room for a few pages of WAL, not for 200 tasks of 8 KB.
	setFileSizeLimit(t, uint64(max(size, 32<<10)+64<<10))
	payload := []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)
	insert := func(id string) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: payload}}})
		return err
	}
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		werr = insert(fmt.Sprintf("t_%03d", i))
	}
	if werr == nil {
		t.Fatal("200 inserts of 8 KB succeeded under a file size limit of a few pages")
	}
	t.Logf("insert past the limit: %v", werr)
	if !errors.Is(werr, store.ErrUnavailable) || !errors.Is(werr, ErrDiskFull) || !errors.Is(werr, store.ErrDiskFull) {
		t.Errorf("insert past the file size limit = %v, want ErrUnavailable and ErrDiskFull", werr)
	}
	if !strings.Contains(werr.Error(), "file size limit") {
		t.Errorf("insert error %q does not name the file size limit", werr)
	}
	err := s.Ping(ctx)
	t.Logf("Ping: %v", err)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrDiskFull) {
		t.Errorf("Ping while writes fail past the file size limit = %v, want ErrUnavailable and ErrDiskFull", err)
	}
	// The writer is not wedged: another write fails the same way, at once.
	if err := insert("t_again"); !errors.Is(err, ErrDiskFull) {
		t.Errorf("second insert past the limit = %v, want ErrDiskFull", err)
	}
	for _, id := range before {
		if _, err := s.GetTask(ctx, id); err != nil {
			t.Errorf("task %s committed before the limit: %v", id, err)
		}
	}
	setFileSizeLimit(t, rlimInfinity)
	if err := insert("t_after"); err != nil {
		t.Fatalf("insert once the limit is raised: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write succeeded again: %v", err)
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatalf("checkpoint once the limit is raised: %v", err)
	}
	if check := pragma(t, s.r, "integrity_check"); check != "ok" {
		t.Fatalf("integrity_check = %q", check)
	}
	for _, id := range append(before, "t_after") {
		if _, err := s.GetTask(ctx, id); err != nil {
			t.Errorf("task %s after the limit was raised: %v", id, err)
		}
	}
}

// TestCheckpointThatCannotGrowTheFileLosesNothing: with the database file
// at the file size limit, commits still go to the WAL, but a checkpoint
// cannot copy new pages into the file. The checkpoint fails; the commits
// it could not copy stay in the WAL and survive a reopen once the limit is
// raised, and the file passes SQLite's integrity check.
func TestCheckpointThatCannotGrowTheFileLosesNothing(t *testing.T) {
	if inOwnProcess(t) {
		return
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	s := openFile(t, path)
	size := checkpointedSize(t, s, path)
	// The WAL and -shm file (32 KiB) fit; the file cannot grow.
	setFileSizeLimit(t, uint64(max(size, 64<<10)))
	payload := []byte(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	var ids []string
	for i := range 3 { // a commit writes a few pages
		id := fmt.Sprintf("t_%02d", i)
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: payload}}}); err != nil {
			t.Fatalf("insert %d into the WAL: %v", i, err)
		}
		ids = append(ids, id)
	}
	var busy, logged, moved int
	err := s.w.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &moved)
	t.Logf("checkpoint past the limit: busy=%d log=%d checkpointed=%d err=%v", busy, logged, moved, err)
	if err == nil && logged >= 0 && moved == logged && busy == 0 {
		st, _ := os.Stat(path)
		t.Fatalf("the checkpoint copied every page into a file that may not grow (%d bytes)", st.Size())
	}
	setFileSizeLimit(t, rlimInfinity)
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s = openFile(t, path)
	for _, id := range ids {
		if _, err := s.GetTask(ctx, id); err != nil {
			t.Errorf("task %s committed to the WAL: %v", id, err)
		}
	}
	if check := pragma(t, s.r, "integrity_check"); check != "ok" {
		t.Fatalf("integrity_check = %q", check)
	}
}

// TestWriteThatChangesNothingKeepsDiskFull: while writes fail for lack of
// space, a write transaction that changes nothing (a fetch or promotion
// with nothing due, which workers and the scheduler run all the time)
// commits without writing a page; it must not mark the disk writable
// again. It did: Ping said ready within a poll interval while every
// enqueue still failed with ErrDiskFull.
func TestWriteThatChangesNothingKeepsDiskFull(t *testing.T) {
	if inOwnProcess(t) {
		return
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	s := openFile(t, path)
	size := checkpointedSize(t, s, path)
	setFileSizeLimit(t, uint64(max(size, 32<<10)+64<<10))
	payload := []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)
	insert := func(id string) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(),
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: payload, RunAt: time.Now().Add(time.Hour)}}})
		return err
	}
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		werr = insert(fmt.Sprintf("t_%03d", i))
	}
	if !errors.Is(werr, ErrDiskFull) {
		t.Fatalf("inserts past the file size limit ended with %v, want ErrDiskFull", werr)
	}
	if _, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"none"}, Limit: 10, WorkerID: "w",
		LeaseDuration: time.Minute, Now: time.Now()}); err != nil {
		t.Fatalf("fetch with nothing due: %v", err)
	}
	if _, err := s.PromoteDue(ctx, store.PromoteParams{Now: time.Now(), Limit: 10}); err != nil {
		t.Fatalf("promotion with nothing due: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrDiskFull) {
		t.Errorf("Ping after writes that changed nothing = %v, want ErrDiskFull: inserts still fail", err)
	}
	if err := insert("t_still"); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("insert still past the limit = %v, want ErrDiskFull", err)
	}
	setFileSizeLimit(t, rlimInfinity)
	if err := insert("t_after"); err != nil {
		t.Fatalf("insert once the limit is raised: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write changed the database again: %v", err)
	}
}
