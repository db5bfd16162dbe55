package retryq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
)

// deadTasks enqueues tasks of the given types whose handlers fail
// permanently with code, and waits until all of them are dead.
func deadTasks(t *testing.T, e *env, code string, types ...string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for _, typ := range types {
		res, err := e.client.Enqueue(ctx, typ, map[string]string{"code": code})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	for _, id := range ids {
		e.waitState(id, 10*time.Second, retryq.StateDead)
	}
	return ids
}

// TestClientDLQSummarizesListsRedrivesAndPurges: a Go program manages the
// dead-letter queue through the Client as the HTTP API and the CLI do:
// a summary by type, code and reason, a filtered list, a filtered redrive
// that runs the tasks again, and a filtered purge that frees their keys.
func TestClientDLQSummarizesListsRedrivesAndPurges(t *testing.T) {
	backendtest.Run(t, testClientDLQSummarizesListsRedrivesAndPurges)
}

func testClientDLQSummarizesListsRedrivesAndPurges(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(3)})
	ctx := context.Background()
	fixed := make(chan struct{})
	fail := func(ctx context.Context, task *retryq.Task) error {
		select {
		case <-fixed:
			return nil
		default:
		}
		var p struct{ Code string }
		if err := task.Decode(&p); err != nil {
			return retryq.Permanent(err)
		}
		return retryq.Permanent(retryq.WithCode(p.Code, errors.New("refused")))
	}
	e.mux.HandleFunc("ocr.page", fail)
	e.mux.HandleFunc("email.send", fail)
	e.startWorker(retryq.WorkerConfig{})

	bad := deadTasks(t, e, "bad_input", "ocr.page", "ocr.page", "email.send")
	quota := deadTasks(t, e, "quota", "ocr.page")

	groups, err := e.client.DeadSummary(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 || groups[0].Type != "ocr.page" || groups[0].ErrorCode != "bad_input" ||
		groups[0].Reason != retryq.DeadNonRetryable || groups[0].Count != 2 {
		t.Fatalf("summary = %+v, want ocr.page/bad_input/non_retryable x2 first of 3 groups", groups)
	}

	page, next, err := e.client.ListDead(ctx, retryq.DeadFilter{Type: "ocr.page", ErrorCode: "bad_input", Limit: 1})
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("first page = %d tasks, cursor %q, %v; want 1 and a cursor", len(page), next, err)
	}
	page2, next, err := e.client.ListDead(ctx, retryq.DeadFilter{Type: "ocr.page", ErrorCode: "bad_input", Limit: 1, Cursor: next})
	if err != nil || len(page2) != 1 || next != "" || page2[0].ID == page[0].ID {
		t.Fatalf("second page = %+v, cursor %q, %v; want the other task and no cursor", page2, next, err)
	}

	close(fixed) // the downstream is fixed: redriven tasks succeed
	n, err := e.client.Redrive(ctx, retryq.DeadFilter{ErrorCode: "bad_input"})
	if err != nil || n != len(bad) {
		t.Fatalf("Redrive = %d, %v; want %d", n, err, len(bad))
	}
	for _, id := range bad {
		e.waitState(id, 10*time.Second, retryq.StateSucceeded)
	}

	n, err = e.client.Purge(ctx, retryq.DeadFilter{Reason: retryq.DeadNonRetryable, IDs: quota})
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if _, err := e.client.Get(ctx, quota[0]); !errors.Is(err, retryq.ErrNotFound) {
		t.Fatalf("Get of a purged task = %v, want ErrNotFound", err)
	}
}

// TestClientDLQRefusesAnEmptyIDListInsteadOfSelectingEverything: a
// program whose list of ids came out empty must not redrive or purge the
// whole dead-letter queue, nor a filter asking for a code and for none
// quietly match nothing; both are ErrInvalid naming the field, and the
// dead task stays.
func TestClientDLQRefusesAnEmptyIDListInsteadOfSelectingEverything(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(1)})
	ctx := context.Background()
	e.mux.HandleFunc("a", func(context.Context, *retryq.Task) error { return retryq.Permanent(errors.New("no")) })
	e.startWorker(retryq.WorkerConfig{})
	ids := deadTasks(t, e, "", "a")

	for name, call := range map[string]func(retryq.DeadFilter) error{
		"ListDead": func(f retryq.DeadFilter) error { _, _, err := e.client.ListDead(ctx, f); return err },
		"Redrive":  func(f retryq.DeadFilter) error { _, err := e.client.Redrive(ctx, f); return err },
		"Purge":    func(f retryq.DeadFilter) error { _, err := e.client.Purge(ctx, f); return err },
	} {
		for field, f := range map[string]retryq.DeadFilter{
			"IDs":         {IDs: []string{}},
			"NoErrorCode": {ErrorCode: "x", NoErrorCode: true},
			"IDs[1]":      {IDs: []string{ids[0], ""}},
			"Reason":      {Reason: "tired"},
		} {
			err := call(f)
			if !errors.Is(err, retryq.ErrInvalid) {
				t.Errorf("%s with a bad %s = %v, want ErrInvalid", name, field, err)
				continue
			}
			// The Go names of the fields, not the HTTP API's.
			if !strings.Contains(err.Error(), field+": ") {
				t.Errorf("%s with a bad %s = %q, want it named %s", name, field, err, field)
			}
			if d, ok := doubledContext(err.Error()); ok {
				t.Errorf("%s = %q: says what failed twice (%q)", name, err, d)
			}
		}
	}
	if _, _, err := e.client.ListDead(ctx, retryq.DeadFilter{Limit: 5000}); !errors.Is(err, retryq.ErrInvalid) ||
		!strings.Contains(err.Error(), "Limit: ") {
		t.Errorf("ListDead with Limit 5000 = %v, want ErrInvalid naming Limit", err)
	}
	if ti := e.waitState(ids[0], time.Second, retryq.StateDead); ti.State != retryq.StateDead {
		t.Fatalf("dead task is %s", ti.State)
	}
}

// TestClientDLQAfterCloseIsErrClosed: the DLQ methods, like the others,
// answer ErrClosed once the Client is closed.
func TestClientDLQAfterCloseIsErrClosed(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	if err := e.client.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err1 := e.client.ListDead(ctx, retryq.DeadFilter{})
	_, err2 := e.client.DeadSummary(ctx, time.Time{})
	_, err3 := e.client.Redrive(ctx, retryq.DeadFilter{})
	_, err4 := e.client.Purge(ctx, retryq.DeadFilter{})
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, retryq.ErrClosed) {
			t.Errorf("call %d after Close = %v, want ErrClosed", i, err)
		}
	}
}

// TestClientDLQRefusesTimesOutsideYears1To9999: a DeadFilter's Since or
// Before, and DeadSummary's since, far outside the years the stores keep
// are ErrInvalid naming the field, as WithRunAt's time is. The stores
// compare them as 64-bit microseconds, which wrapped around: Since in year
// 300000 selected the tasks dead now, and a Purge of the tasks dead before
// year -300000 deleted the whole dead-letter queue.
func TestClientDLQRefusesTimesOutsideYears1To9999(t *testing.T) {
	backendtest.Run(t, testClientDLQRefusesTimesOutsideYears1To9999)
}

func testClientDLQRefusesTimesOutsideYears1To9999(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{DefaultPolicy: fastPolicy(1)})
	ctx := context.Background()
	e.mux.HandleFunc("a", func(context.Context, *retryq.Task) error { return retryq.Permanent(errors.New("no")) })
	e.startWorker(retryq.WorkerConfig{})
	ids := deadTasks(t, e, "", "a")

	year := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
	for name, call := range map[string]func(retryq.DeadFilter) error{
		"ListDead": func(f retryq.DeadFilter) error { _, _, err := e.client.ListDead(ctx, f); return err },
		"Redrive":  func(f retryq.DeadFilter) error { _, err := e.client.Redrive(ctx, f); return err },
		"Purge":    func(f retryq.DeadFilter) error { _, err := e.client.Purge(ctx, f); return err },
	} {
		for _, tc := range []struct {
			field string
			f     retryq.DeadFilter
		}{
			{"Since", retryq.DeadFilter{Since: year(300000)}},
			{"Since", retryq.DeadFilter{Since: year(10000)}},
			{"Before", retryq.DeadFilter{Before: year(-300000)}},
			{"Before", retryq.DeadFilter{Before: year(0)}},
		} {
			err := call(tc.f)
			if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), tc.field+": ") {
				t.Errorf("%s with Since %v, Before %v = %v, want ErrInvalid naming %s", name,
					tc.f.Since, tc.f.Before, err, tc.field)
			}
		}
	}
	for _, y := range []int{300000, 10000, -300000} {
		groups, err := e.client.DeadSummary(ctx, year(y))
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), "summarize dead tasks: since: ") {
			t.Errorf("DeadSummary since year %d = %d groups, %v; want ErrInvalid naming since", y, len(groups), err)
		}
	}
	// The years the stores keep still select as before.
	dead, _, err := e.client.ListDead(ctx, retryq.DeadFilter{Since: year(1), Before: year(9999)})
	if err != nil || len(dead) != 1 {
		t.Fatalf("ListDead over years 1 to 9999 = %d tasks, %v; want the dead task", len(dead), err)
	}
	if ti := e.waitState(ids[0], time.Second, retryq.StateDead); ti.State != retryq.StateDead {
		t.Fatalf("dead task is %s", ti.State)
	}
}
