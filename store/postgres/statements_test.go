package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// The writer picks a statement by the shape of a batch: a VALUES list for
// small inserts, arrays for large ones; a narrow statement for a batch of
// plain successes, the general one otherwise. These tests check that each
// pair stores exactly the same rows.

func TestInsertStatementBySize(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{1, insertValuesSQL[1]}, {8, insertValuesSQL[8]}, {maxValuesRows, insertValuesSQL[maxValuesRows]}, {maxValuesRows + 1, insertRowsSQL}} {
		r := make(insertRows, 0, tc.n)
		for i := range tc.n {
			r = append(r, rowOfTask(fmt.Sprint(i), "x", nil, t0))
		}
		sql, args := insertStatement([]insertRows{r}, len(r))
		if sql != tc.want {
			t.Errorf("%d rows: statement %.60q, want %.60q", tc.n, sql, tc.want)
		}
		if tc.n <= maxValuesRows && len(args) != tc.n*valuesParams {
			t.Errorf("%d rows: %d parameters, want %d", tc.n, len(args), tc.n*valuesParams)
		}
	}
}

// TestInsertValuesMatchesArrays inserts the same mix of tasks (pending,
// scheduled, leased at insert, with and without payload, priority and
// attempts) once as a VALUES insert and once as an array insert, and
// compares every stored field.
func TestInsertValuesMatchesArrays(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	mix := func(prefix string, n int) []store.NewTask {
		ts := make([]store.NewTask, n)
		for i := range ts {
			nt := store.NewTask{ID: fmt.Sprintf("%s-%03d", prefix, i), Type: "mix", Priority: i%3 - 1, MaxAttempts: i % 4}
			switch i % 4 {
			case 0:
				nt.Payload = json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`)
			case 1:
				nt.RunAt = t0.Add(time.Hour)
			case 2:
				nt.Lease = &store.NewLease{LeaseID: "lease-" + nt.ID, WorkerID: "w1", Duration: time.Minute}
				nt.Payload = json.RawMessage(`[]`)
			}
			ts[i] = nt
		}
		return ts
	}
	small, large := mix("v", maxValuesRows), mix("a", maxValuesRows+4)
	for _, batch := range [][]store.NewTask{small, large} {
		res, err := s.InsertTasks(ctx, store.InsertParams{Tasks: batch, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			got, err := s.GetTask(ctx, batch[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r.Task) {
				t.Errorf("task %s as stored:\n%+v\nas returned by InsertTasks:\n%+v", batch[i].ID, got, r.Task)
			}
		}
	}
	// Row i of each batch had the same input apart from its id.
	for i := range small {
		v, err := s.GetTask(ctx, small[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.GetTask(ctx, large[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		a.ID, a.LeaseID = v.ID, v.LeaseID
		if !reflect.DeepEqual(v, a) {
			t.Errorf("row %d differs between VALUES and array inserts:\n%+v\n%+v", i, v, a)
		}
	}
}

// TestSuccessBatchMatchesGeneral records the same success once in a batch
// of successes only (recordSuccessesSQL) and once beside a failure
// (recordOutcomesSQL), and compares the stored tasks and histories.
func TestSuccessBatchMatchesGeneral(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("s", 3), Now: t0}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 3, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(leased) != 3 {
		t.Fatalf("FetchTasks: %d tasks, %v", len(leased), err)
	}
	done := t0.Add(time.Second)
	success := func(l store.Task) store.Outcome {
		return store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateSucceeded, LastDelay: 3 * time.Second,
			Detail: "200 OK", OutcomeKind: store.OutcomeSucceeded}
	}
	failure := store.Outcome{TaskID: leased[2].ID, LeaseID: leased[2].LeaseID, State: store.StateRetryWaiting, RunAt: t0.Add(time.Hour),
		Error: &store.ErrorInfo{Code: "E", Message: "m", Class: "transient"}, OutcomeKind: store.OutcomeFailed}
	for _, batch := range [][]store.Outcome{
		{success(leased[0])},
		{success(leased[1]), failure},
		{success(leased[0])}, // again: the lease is gone
	} {
		errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: batch, Now: done})
		if err != nil {
			t.Fatal(err)
		}
		if batch[0].TaskID == leased[0].ID && errs[0] != nil && !errors.Is(errs[0], store.ErrLeaseLost) {
			t.Fatalf("repeated success: %v, want ErrLeaseLost", errs[0])
		}
	}
	fast, err := s.GetTask(ctx, leased[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	general, err := s.GetTask(ctx, leased[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if fast.State != store.StateSucceeded || fast.LastDelay != 3*time.Second || fast.LeaseID != "" || !fast.UpdatedAt.Equal(done) {
		t.Fatalf("success batch stored %+v", fast)
	}
	general.ID, general.Payload = fast.ID, fast.Payload
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("success stored differently:\nalone:  %+v\nmixed:  %+v", fast, general)
	}
	hf, err := s.ListAttempts(ctx, leased[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	hg, err := s.ListAttempts(ctx, leased[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hf) != 1 || len(hg) != 1 {
		t.Fatalf("histories %+v and %+v, want one success each", hf, hg)
	}
	hg[0].TaskID = hf[0].TaskID
	if !reflect.DeepEqual(hf, hg) {
		t.Fatalf("history differs:\nalone: %+v\nmixed: %+v", hf, hg)
	}
}

// TestInsertStatementMergesParts: the inserts of several writes of a group
// become one statement whose rows are the writes' rows in order, as a
// VALUES list up to maxValuesRows rows and as arrays beyond.
func TestInsertStatementMergesParts(t *testing.T) {
	parts := func(sizes ...int) ([]insertRows, []string) {
		var ps []insertRows
		var ids []string
		for p, n := range sizes {
			r := make(insertRows, 0, n)
			for i := range n {
				id := fmt.Sprintf("p%d-%d", p, i)
				r = append(r, rowOfTask(id, "x", nil, t0))
				ids = append(ids, id)
			}
			ps = append(ps, r)
		}
		return ps, ids
	}
	ps, ids := parts(1, 2, 3)
	sql, args := insertStatement(ps, len(ids))
	if sql != insertValuesSQL[6] || len(args) != 6*valuesParams {
		t.Fatalf("6 rows in 3 parts: statement %.50q with %d parameters", sql, len(args))
	}
	for i, id := range ids {
		if got := args[i*valuesParams]; got != id {
			t.Errorf("VALUES row %d has id %v, want %s", i, got, id)
		}
	}
	ps, ids = parts(2, 8, 10)
	sql, args = insertStatement(ps, len(ids))
	if sql != insertRowsSQL {
		t.Fatalf("20 rows in 3 parts: statement %.50q, want the array insert", sql)
	}
	if got := args[0].([]string); !reflect.DeepEqual(got, ids) {
		t.Errorf("array ids %q, want %q", got, ids)
	}
	ords := args[8].([]int32)
	for i, o := range ords {
		if int(o) != i {
			t.Fatalf("array ords %v, want 0..%d", ords, len(ids)-1)
		}
	}
}

// TestInsertOneTaskAllocations guards the cost of the common write, a
// single enqueue: its row and its statement's parameters. One slice of
// row structs (not a slice per column) and parameters boxed once each keep
// it at ten allocations; the slice-per-column layout took 22.
func TestInsertOneTaskAllocations(t *testing.T) {
	lease := "lease-1"
	allocs := testing.AllocsPerRun(200, func() {
		r := make(insertRows, 0, 1)
		row := rowOfTask("task-1", "bench", []byte(`{}`), t0)
		row.state, row.attempt, row.leaseID, row.worker, row.leaseExp = string(store.StateRunning), 1, &lease, "w", t0
		r = append(r, row)
		_, args := insertStatement([]insertRows{r}, len(r))
		if len(args) != valuesParams {
			t.Fatalf("%d parameters, want %d", len(args), valuesParams)
		}
	})
	if allocs > 12 {
		t.Fatalf("one task's row and statement take %.0f allocations, want at most 12", allocs)
	}
	t.Logf("one task's row and statement: %.0f allocations", allocs)
}
