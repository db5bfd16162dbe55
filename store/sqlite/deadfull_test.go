package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestDeadChangeRolledBackReportsNothing: a redrive, purge or retention
// pass whose transaction fails to commit (the disk is full) moved or
// deleted nothing, and says so: 0 with the error, not the rows its
// statements touched before the rollback, which a caller would report as
// redriven or deleted.
func TestDeadChangeRolledBackReportsNothing(t *testing.T) {
	dir := mountSmallTmpfs(t, 4<<20)
	ctx := t.Context()
	s := openFile(t, filepath.Join(dir, "q.db"))
	const n = 2000
	now := time.Now()
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{ID: fmt.Sprintf("t_%04d", i), Type: "t", MaxAttempts: 1, Payload: []byte(`{}`)}
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"t"}, Limit: n, WorkerID: "w", LeaseDuration: time.Hour, Now: now})
	if err != nil || len(leased) != n {
		t.Fatalf("fetch: %d tasks, %v", len(leased), err)
	}
	outs := make([]store.Outcome, n)
	for i := range leased {
		outs[i] = store.Outcome{TaskID: leased[i].ID, LeaseID: leased[i].LeaseID, State: store.StateDead,
			DeadReason: store.DeadNonRetryable, OutcomeKind: store.OutcomeFailed,
			Error: &store.ErrorInfo{Code: "E", Message: "no", Class: "permanent"}}
	}
	if _, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for i := 0; i < 2048; i++ {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	defer os.Remove(filler)
	later := now.Add(time.Hour)
	moved, err := s.RedriveDead(ctx, store.DeadFilter{Now: later})
	if err == nil {
		t.Skipf("the redrive of %d tasks committed on a full file system (%d moved)", n, moved)
	}
	if moved != 0 {
		t.Errorf("RedriveDead rolled back = %d, %v; want 0", moved, err)
	}
	purged, err := s.PurgeDead(ctx, store.DeadFilter{})
	if err != nil && purged != 0 {
		t.Errorf("PurgeDead rolled back = %d, %v; want 0", purged, err)
	}
	res, err := s.DeleteFinished(ctx, store.RetentionParams{DeadBefore: later})
	if err != nil && res != (store.RetentionResult{}) {
		t.Errorf("DeleteFinished rolled back = %+v, %v; want nothing deleted", res, err)
	}
}
