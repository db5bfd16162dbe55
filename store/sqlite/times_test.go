package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestUnstorableTimesRefused: a time outside what 64 bits of unix
// microseconds hold (about years -290,000 to 294,000), such as a "never"
// sentinel, is refused with ErrInvalid where the store would write it: an
// insert's run time and now, a retry's run time, a lease's new expiry. It
// used to wrap around silently: a task to run "never" was stored as due
// hundreds of thousands of years ago, and ran at once.
func TestUnstorableTimesRefused(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, bad := range []time.Time{
		time.Unix(1<<62, 0),
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "never", Type: "a", RunAt: bad}}})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("InsertTasks with RunAt %v = %v, want ErrInvalid", bad, err)
		}
		if _, err := s.GetTask(ctx, "never"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the task with RunAt %v was stored (GetTask = %v)", bad, err)
		}
		_, err = s.InsertTasks(ctx, store.InsertParams{Now: bad, Tasks: []store.NewTask{{ID: "then", Type: "a"}}})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("InsertTasks with Now %v = %v, want ErrInvalid", bad, err)
		}

		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "run", Type: "r"}}}); err != nil {
			t.Fatal(err)
		}
		leased, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"r"}, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
		if err != nil || len(leased) != 1 {
			t.Fatalf("FetchTasks = %v, %v", leased, err)
		}
		l := leased[0]
		errs, err := s.ExtendLeases(ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{{TaskID: l.ID, LeaseID: l.LeaseID, ExpiresAt: bad}}})
		if err != nil || len(errs) != 1 || !errors.Is(errs[0], store.ErrInvalid) {
			t.Errorf("ExtendLeases to %v = %v, %v; want ErrInvalid for the lease", bad, errs, err)
		}
		errs, err = s.RecordOutcomes(ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{TaskID: l.ID, LeaseID: l.LeaseID,
			State: store.StateRetryWaiting, RunAt: bad, Error: &store.ErrorInfo{Code: "E", Class: "transient"}}}})
		if err != nil || len(errs) != 1 || !errors.Is(errs[0], store.ErrInvalid) {
			t.Errorf("RecordOutcomes retrying at %v = %v, %v; want ErrInvalid for the outcome", bad, errs, err)
		}
		got, err := s.GetTask(ctx, l.ID)
		if err != nil || got.State != store.StateRunning || !got.LeaseExpiresAt.Equal(l.LeaseExpiresAt) {
			t.Errorf("task %s after the refused changes: %+v, %v; want it running under its lease", l.ID, got, err)
		}
		if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateSucceeded}}}); err != nil || errs[0] != nil {
			t.Fatalf("RecordOutcomes: %v %v", errs, err)
		}
		if _, err := s.PurgeDead(ctx, store.DeadFilter{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
}
