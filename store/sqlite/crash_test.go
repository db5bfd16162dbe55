package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// envCrashChild makes the test binary a child process that writes to the
// database it names until it is killed (see TestCrashHelperProcess).
const envCrashChild = "RETRYQ_SQLITE_CRASH_CHILD"

// crashLease is the lease of the tasks the crashing child fetches.
const crashLease = time.Minute

// TestCrashHelperProcess is not a test: it is the child process of
// TestKilledWriterLosesNothing. Producers insert tasks one at a time (so
// group commits carry many), a worker leases them and records successes;
// after each write returns, the child appends a line to its log: "i ID"
// once an insert returned, "d ID" once a success was recorded.
func TestCrashHelperProcess(t *testing.T) {
	dir := os.Getenv(envCrashChild)
	if dir == "" {
		t.Skip("child process of TestKilledWriterLosesNothing")
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(3)
	}
	s, err := Open(context.Background(), Config{Path: filepath.Join(dir, "retryq.db")})
	if err != nil {
		fail("open: %v", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "acked"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail("open log: %v", err)
	}
	var mu sync.Mutex
	ack := func(kind, id string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := logf.WriteString(kind + " " + id + "\n"); err != nil {
			fail("log: %v", err)
		}
	}
	ctx := context.Background()
	for p := range 8 {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("p%d-%06d", p, i)
				nt := store.NewTask{ID: id, Type: "crash", Payload: []byte(`{"n":1}`), IdempotencyKey: "k-" + id}
				if _, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{nt}}); err != nil {
					fail("insert %s: %v", id, err)
				}
				ack("i", id)
			}
		}()
	}
	for {
		leased, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"crash"}, Limit: 16, WorkerID: "child", LeaseDuration: crashLease, Now: time.Now()})
		if err != nil {
			fail("fetch: %v", err)
		}
		// The first task of each fetch stays leased, as if its handler
		// were still running when the process died; the others succeed.
		var outs []store.Outcome
		for i, l := range leased {
			if i > 0 {
				outs = append(outs, store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateSucceeded})
			}
		}
		if len(outs) == 0 {
			continue
		}
		errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Now: time.Now(), Outcomes: outs})
		if err != nil {
			fail("record: %v", err)
		}
		for i, o := range outs {
			if errs[i] != nil {
				fail("record %s: %v", o.TaskID, errs[i])
			}
			ack("d", o.TaskID)
		}
	}
}

// TestKilledWriterLosesNothing: a process killed (SIGKILL) while it commits
// inserts and outcomes leaves a database that opens again, passes SQLite's
// integrity check, and holds every write the process had been told was
// committed; tasks it had leased stay running until their leases expire,
// and are then offered to the reaper.
func TestKilledWriterLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelperProcess$")
	cmd.Env = append(os.Environ(), envCrashChild+"="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logPath := filepath.Join(dir, "acked")
	const enough = 2000 // log lines before the kill
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Count(b, []byte("\n")) >= enough && bytes.Contains(b, []byte("d ")) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the child exited early (%v): %s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child logged fewer than %d writes in 90 s: %s", enough, out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed: %s", err, out.String())
	}
	killedAt := time.Now()

	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	inserted, succeeded := map[string]bool{}, map[string]bool{}
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] { // the last one may be torn
		kind, id, ok := strings.Cut(line, " ")
		switch {
		case ok && kind == "i":
			inserted[id] = true
		case ok && kind == "d":
			succeeded[id] = true
		default:
			t.Fatalf("bad log line %q", line)
		}
	}

	s, err := Open(t.Context(), Config{Path: filepath.Join(dir, "retryq.db")})
	if err != nil {
		t.Fatalf("reopen after the kill: %v", err)
	}
	defer s.Close()
	if got := pragma(t, s.w, "integrity_check"); got != "ok" {
		t.Fatalf("integrity_check after the kill: %s", got)
	}
	tasks := map[string]store.Task{}
	for cursor := ""; ; {
		page, next, err := s.ListTasks(t.Context(), store.ListParams{Type: "crash", Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			tasks[tk.ID] = tk
		}
		if next == "" {
			break
		}
		cursor = next
	}
	running := 0
	for _, tk := range tasks {
		if tk.State == store.StateRunning {
			running++
		}
	}
	for id := range inserted {
		if _, ok := tasks[id]; !ok {
			t.Errorf("task %s was acknowledged as inserted but is gone after the kill", id)
		}
	}
	for id := range succeeded {
		if tk := tasks[id]; tk.State != store.StateSucceeded {
			t.Errorf("task %s was acknowledged as succeeded but is %q after the kill", id, tk.State)
		}
	}
	if running == 0 {
		t.Fatal("no task was left leased by the killed process")
	}
	// An idempotency key survives too: inserting an acknowledged task again
	// returns the stored one.
	for id := range inserted {
		res, err := s.InsertTasks(t.Context(), store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: id + "-again", Type: "crash", IdempotencyKey: "k-" + id}}})
		if err != nil || !res[0].Duplicate || res[0].Task.ID != id {
			t.Errorf("insert again with the key of %s: %+v, %v; want a duplicate of %s", id, res, err, id)
		}
		break
	}
	// The killed process's leases are not expired yet; once they are, the
	// reaper is offered every one of them.
	exp, err := s.ExpiredLeases(t.Context(), store.ExpiredParams{Limit: 100000, Now: killedAt})
	if err != nil || len(exp) != 0 {
		t.Errorf("ExpiredLeases before the leases ran out = %d tasks, %v; want none", len(exp), err)
	}
	exp, err = s.ExpiredLeases(t.Context(), store.ExpiredParams{Limit: 100000, Now: killedAt.Add(crashLease + time.Second)})
	if err != nil || len(exp) != running {
		t.Errorf("ExpiredLeases after the leases ran out = %d tasks, %v; want the %d left running", len(exp), err, running)
	}
	if len(inserted) == 0 || len(succeeded) == 0 {
		t.Fatalf("the child acknowledged %d inserts and %d successes", len(inserted), len(succeeded))
	}
	t.Logf("after the kill: %d tasks stored, %d acknowledged inserts, %d acknowledged successes, %d left running", len(tasks), len(inserted), len(succeeded), running)
}
