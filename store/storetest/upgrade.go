package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// CheckUpgradeFixture checks, after an upgrade, the fixture a backend's
// upgrade test wrote in an older schema layout, finished at finished: a
// task "ok" that succeeded at its first attempt (worker "w", detail
// "200 OK"), a task "bad" dead after one failed attempt (code "E400"), and
// a type "t" (priority 3, timeout 1000ns, policy {"max_attempts":5}). Both
// tasks must read back with their history, the type with its settings, and
// retention must delete the dead task and count it. Each backend writes the
// fixture in its own old layouts; the checks are the storage contract's.
func CheckUpgradeFixture(ctx context.Context, t *testing.T, st store.Store, finished time.Time) {
	t.Helper()
	for id, want := range map[string]store.State{"ok": store.StateSucceeded, "bad": store.StateDead} {
		task, err := st.GetTask(ctx, id)
		if err != nil || task.State != want || !task.UpdatedAt.Equal(finished) {
			t.Errorf("GetTask(%s) = %+v, %v; want %s, updated %v", id, task, err, want, finished)
		}
	}
	ok, err := st.ListAttempts(ctx, "ok")
	if err != nil || len(ok) != 1 || ok[0].Outcome != store.OutcomeSucceeded || ok[0].Detail != "200 OK" ||
		ok[0].WorkerID != "w" || !ok[0].FinishedAt.Equal(finished) {
		t.Errorf("history of the succeeded task = %+v, %v", ok, err)
	}
	bad, err := st.ListAttempts(ctx, "bad")
	if err != nil || len(bad) != 1 || bad[0].Outcome != store.OutcomeFailed || bad[0].Error == nil || bad[0].Error.Code != "E400" {
		t.Errorf("history of the dead task = %+v, %v", bad, err)
	}
	if tc, err := st.GetType(ctx, "t"); err != nil || tc.Priority != 3 || tc.Timeout != 1000 || string(tc.Policy) != `{"max_attempts":5}` {
		t.Errorf("GetType = %+v, %v", tc, err)
	}
	// The dead task is found by each filter, through the indexes a later
	// migration built over the rows already there.
	for _, f := range []store.DeadFilter{{}, {Type: "t"}, {ErrorCode: "E400"}, {Reason: "non_retryable"},
		{Type: "t", ErrorCode: "E400", Reason: "non_retryable"}} {
		f.Limit = 10
		if ts, _, err := st.ListDead(ctx, f); err != nil || len(ts) != 1 || ts[0].ID != "bad" {
			t.Errorf("ListDead(%+v) = %d tasks, %v; want the dead task", f, len(ts), err)
		}
	}
	// Retention deletes the dead task and counts it in the newest table.
	res, err := st.DeleteFinished(ctx, store.RetentionParams{DeadBefore: finished.Add(time.Hour), Limit: 10})
	if err != nil || res.Dead != 1 {
		t.Errorf("DeleteFinished of the dead task = %+v, %v", res, err)
	}
}
