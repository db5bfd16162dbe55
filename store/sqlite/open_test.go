package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestOpenWaitsForLockOnNewFile: a database file another process is
// creating (still in rollback-journal mode, its write lock taken) makes
// Open wait up to BusyTimeout, as for any other lock, and succeed once the
// lock is released. Switching the file to WAL used to fail at once with
// SQLITE_BUSY: SQLite does not call the busy handler for that switch.
func TestOpenWaitsForLockOnNewFile(t *testing.T) {
	ctx := t.Context()

	// The lock is never released: Open gives up after BusyTimeout, not
	// before.
	path := filepath.Join(t.TempDir(), "held.db")
	lockedByAnother(t, path)
	const busy = 300 * time.Millisecond
	start := time.Now()
	s, err := Open(ctx, Config{Path: path, BusyTimeout: busy})
	took := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded while another connection held the write lock of a new file")
	}
	if !errors.Is(err, store.ErrUnavailable) || took < busy {
		t.Errorf("Open of a locked new file failed after %v with %v; want ErrUnavailable after the busy timeout (%v)", took, err, busy)
	}

	// The lock is released while Open waits: Open succeeds.
	path = filepath.Join(t.TempDir(), "released.db")
	conn := lockedByAnother(t, path)
	release := time.AfterFunc(100*time.Millisecond, func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") })
	defer release.Stop()
	s, err = Open(ctx, Config{Path: path, BusyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Open of a new file whose lock is released within the busy timeout: %v", err)
	}
	defer s.Close()
	if got := pragma(t, s.w, "journal_mode"); got != "wal" {
		t.Errorf("journal_mode = %s, want wal", got)
	}
	if applied, known, err := s.SchemaVersion(ctx); err != nil || applied != known {
		t.Errorf("SchemaVersion = %d, %d, %v", applied, known, err)
	}
}

// envOpenChild makes the test binary a child process that opens the
// database at the path it names and exits (see TestOpenHelperProcess).
const envOpenChild = "RETRYQ_SQLITE_OPEN_CHILD"

// TestOpenHelperProcess is not a test: it is the child process of
// TestOpenNewFileFromProcesses.
func TestOpenHelperProcess(t *testing.T) {
	path := os.Getenv(envOpenChild)
	if path == "" {
		t.Skip("child process of TestOpenNewFileFromProcesses")
	}
	s, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		fmt.Fprintf(os.Stderr, "open: %v\n", err)
		os.Exit(3)
	}
	if err := s.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "close: %v\n", err)
		os.Exit(4)
	}
}

// TestOpenNewFileFromProcesses: processes started together on a database
// file that does not exist yet (a server and `retryq migrate`, two
// servers) all open it; none fails with "database is locked".
func TestOpenNewFileFromProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const rounds, procs = 6, 3
	dir := t.TempDir()
	for round := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("r%d.db", round))
		var wg sync.WaitGroup
		errs := make([]error, procs)
		outs := make([]bytes.Buffer, procs)
		for i := range procs {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOpenHelperProcess$")
			cmd.Env = append(os.Environ(), envOpenChild+"="+path)
			cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
			wg.Go(func() { errs[i] = cmd.Run() })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: process %d: %v: %s", round, i, err, strings.TrimSpace(outs[i].String()))
			}
		}
		if t.Failed() {
			return
		}
	}
}

// TestOpenReadOnlyFileRefused: a database file the process may not write
// is refused by Open with ErrReadOnly. It used to open, answer reads and
// pings (so a server reported ready), and fail every write.
//
// Root may write any file: run as root, the test runs again as user nobody
// (runUnprivileged).
func TestOpenReadOnlyFileRefused(t *testing.T) {
	if runUnprivileged(t) {
		return
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ro.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, Config{Path: path})
	if err == nil {
		_, werr := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "t", Type: "a"}}})
		s.Close()
		t.Fatalf("Open of a read-only file succeeded (a write then returned %v); want ErrReadOnly", werr)
	}
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("Open of a read-only file = %v, want ErrReadOnly", err)
	}
}

// TestPingFailsOnAFileThatMayNotBeWritten: a store whose file may no longer
// be written (its permissions changed, or its file system was remounted
// read-only, as Linux does after I/O errors) still answers reads, but every
// write fails. Ping, which backs the server's /readyz, says so with
// ErrUnavailable and ErrReadOnly, and says ready again once the file may be
// written. Before, Ping only read, and the node called itself ready while
// every enqueue failed. Run as root, the test runs as user nobody.
func TestPingFailsOnAFileThatMayNotBeWritten(t *testing.T) {
	if runUnprivileged(t) {
		return
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a writable file: %v", err)
	}
	for _, p := range []string{path, path + "-wal"} {
		if err := os.Chmod(p, 0o400); err != nil {
			t.Fatal(err)
		}
		err = s.Ping(ctx)
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Ping with %s read-only: %v, want ErrUnavailable and ErrReadOnly", filepath.Base(p), err)
		}
		t.Logf("Ping with %s read-only: %v", filepath.Base(p), err)
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping once writable again: %v", err)
		}
	}
}

// TestPingChecksTheFilesSQLiteWrites: Ping checks the files SQLite really
// writes, whatever path the store was opened by. SQLite follows a symbolic
// link to the database and keeps its WAL next to the link's target, and it
// makes a relative path absolute when it opens it; Ping looked for the WAL
// next to the link (where there is none) and for both files relative to
// the working directory of the moment, so it kept saying ready with the
// WAL read-only. Run as root, the test runs as user nobody.
func TestPingChecksTheFilesSQLiteWrites(t *testing.T) {
	if runUnprivileged(t) {
		return
	}
	ctx := t.Context()
	dir := t.TempDir()
	data, links := filepath.Join(dir, "data"), filepath.Join(dir, "links")
	for _, d := range []string{data, links} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(data, "q.db")
	if err := os.Symlink(target, filepath.Join(links, "q.db")); err != nil {
		t.Fatal(err)
	}
	// Opened by a relative path through the link, from the links
	// directory; Ping runs from another working directory.
	t.Chdir(links)
	s, err := Open(ctx, Config{Path: "q.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Chdir(dir)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a writable file: %v", err)
	}
	for _, p := range []string{target, target + "-wal"} {
		if err := os.Chmod(p, 0o400); err != nil {
			t.Fatal(err)
		}
		err = s.Ping(ctx)
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Ping with %s read-only: %v, want ErrUnavailable and ErrReadOnly", p, err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping once %s is writable again: %v", p, err)
		}
	}
}

// TestOpenNotADatabase: a file that is not a SQLite database is refused
// with a clear error and left as it was.
func TestOpenNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.db")
	text := bytes.Repeat([]byte("these are my notes, not a database\n"), 200)
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), Config{Path: path})
	if err == nil {
		s.Close()
		t.Fatal("Open of a text file succeeded")
	}
	if !strings.Contains(err.Error(), "not a database") {
		t.Errorf("Open of a text file = %v, want an error saying it is not a database", err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, text) {
		t.Errorf("the text file was changed (%v)", err)
	}
}

// TestOpenNewFileOwnerOnly: a database file Open creates, and the WAL and
// shared-memory files beside it, are readable by their owner only: they
// hold every task's payload. SQLite alone created them 0644 under the
// usual umask.
func TestOpenNewFileOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.InsertTasks(t.Context(), store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: "a", Type: "t", Payload: []byte(`"secret"`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s: mode %v, want no access for group and others", filepath.Base(name), perm)
		}
	}
}

// TestOpenExistingFileKeepsItsMode: a database file that exists is opened
// as it is; its mode is the operator's to choose.
func TestOpenExistingFileKeepsItsMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode after Open: %v, %v; want 0640", fi.Mode().Perm(), err)
	}
}

// TestOpenMissingDirectoryNamed: a path in a directory that does not exist
// fails with an error naming that directory, not SQLite's "unable to open
// database file", and creates nothing.
func TestOpenMissingDirectoryNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := Open(t.Context(), Config{Path: filepath.Join(dir, "q.db")})
	if err == nil || !strings.Contains(err.Error(), "directory "+dir+" does not exist") {
		t.Fatalf("Open in a missing directory: %v; want the directory named", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("directory created: %v", serr)
	}
}

// TestOpenNilContext: Open refuses a nil context with ErrInvalid naming
// ctx, as every store method does, instead of panicking in database/sql.
func TestOpenNilContext(t *testing.T) {
	//lint:ignore SA1012 the nil context is what is tested
	s, err := Open(nil, Config{Path: filepath.Join(t.TempDir(), "nil.db")}) //nolint:staticcheck
	if err == nil {
		_ = s.Close()
	}
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "ctx") {
		t.Fatalf("Open(nil) = %v, want ErrInvalid naming ctx", err)
	}
}
