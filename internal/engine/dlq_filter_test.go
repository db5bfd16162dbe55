package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// deadTask stores a task of typ that died of a permanent error with code
// (none when empty) and returns its id.
func deadTask(t *testing.T, st store.Store, id, typ, code string) string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	if _, err := st.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{{ID: id, Type: typ, Payload: []byte("null")}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	leased, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{typ}, Limit: 1, WorkerID: "w", LeaseDuration: time.Hour, Now: now})
	if err != nil || len(leased) != 1 {
		t.Fatalf("fetch: %d tasks, %v", len(leased), err)
	}
	out := store.Outcome{TaskID: id, LeaseID: leased[0].LeaseID, State: store.StateDead, DeadReason: store.DeadNonRetryable,
		Error: &store.ErrorInfo{Code: code, Message: "no", Class: "permanent"}, OutcomeKind: store.OutcomeFailed}
	if _, err := st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{out}, Now: now}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDeadFilterRulesAreTheEngines: the engine itself, whichever entry
// point the filter came through, refuses an empty (non-nil) id list, which
// the store would read as no filter and so redrive or purge the whole DLQ,
// and a filter asking for an error code and for none, which would quietly
// match nothing: both are FieldErrors naming the field, and the dead tasks
// stay dead.
func TestDeadFilterRulesAreTheEngines(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	ctx := context.Background()
	id := deadTask(t, st, "dlq-rule-1", "dlq.rule", "E1")

	for _, c := range []struct {
		f     store.DeadFilter
		field string
	}{
		{store.DeadFilter{IDs: []string{}}, "ids"},
		{store.DeadFilter{ErrorCode: "E1", NoErrorCode: true}, "no_error_code"},
	} {
		_, _, errList := e.ListDead(ctx, c.f)
		_, errRedrive := e.Redrive(ctx, c.f)
		_, errPurge := e.Purge(ctx, c.f)
		for name, err := range map[string]error{"ListDead": errList, "Redrive": errRedrive, "Purge": errPurge} {
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s(%+v) = %v, want a FieldError on %s", name, c.f, err, c.field)
			}
		}
	}
	got, err := e.Get(ctx, id)
	if err != nil || got.State != store.StateDead {
		t.Fatalf("dead task after the refused calls: %s, %v", got.State, err)
	}
	// A nil list does not filter.
	if n, err := e.Redrive(ctx, store.DeadFilter{IDs: nil, ErrorCode: "E1"}); err != nil || n != 1 {
		t.Fatalf("Redrive with nil ids = %d, %v; want 1", n, err)
	}
}
