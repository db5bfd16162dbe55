package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/retryq/retryq"
)

// doubledContext returns the first two adjacent parts of an error message
// ("verb noun ...: verb noun ...: cause") that begin with the same verb
// and noun: two layers both saying what failed.
func doubledContext(msg string) (string, bool) {
	parts := strings.Split(msg, ": ")
	head := func(s string) string {
		f := strings.Fields(s)
		if len(f) < 2 {
			return ""
		}
		return f[0] + " " + f[1]
	}
	for i := 1; i < len(parts); i++ {
		if h := head(parts[i]); h != "" && h == head(parts[i-1]) {
			return parts[i-1] + ": " + parts[i], true
		}
	}
	return "", false
}

// TestErrorsNameTheirOperationOnce: a failed call says what failed once
// ("get task t1: not found"), not once per layer ("get task t1: get task
// t1: not found"), for a missing task, a task in the wrong state and a
// store that fails.
func TestErrorsNameTheirOperationOnce(t *testing.T) {
	st := openStore(t, "")
	e := newEnvOn(t, st, retryq.Options{})
	ctx := context.Background()
	res, err := e.client.Enqueue(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Cancel(ctx, res.Task.ID); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s = %v, want %v", what, err, want)
			return
		}
		if d, ok := doubledContext(err.Error()); ok {
			t.Errorf("%s = %q: says what failed twice (%q)", what, err, d)
		}
	}
	_, err = e.client.Get(ctx, "t1")
	check("Get of a missing task", err, retryq.ErrNotFound)
	_, err = e.client.Attempts(ctx, "t1")
	check("Attempts of a missing task", err, retryq.ErrNotFound)
	_, err = e.client.Cancel(ctx, "t1")
	check("Cancel of a missing task", err, retryq.ErrNotFound)
	_, err = e.client.Retry(ctx, "t1")
	check("Retry of a missing task", err, retryq.ErrNotFound)
	_, err = e.client.Cancel(ctx, res.Task.ID)
	check("Cancel of a cancelled task", err, retryq.ErrConflict)

	// A store that fails: every call says what failed once.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"Get":      func() error { _, err := e.client.Get(ctx, res.Task.ID); return err },
		"Attempts": func() error { _, err := e.client.Attempts(ctx, res.Task.ID); return err },
		"List":     func() error { _, _, err := e.client.List(ctx, retryq.ListParams{}); return err },
		"Cancel":   func() error { _, err := e.client.Cancel(ctx, res.Task.ID); return err },
		"Retry":    func() error { _, err := e.client.Retry(ctx, res.Task.ID); return err },
		"EnqueueMany": func() error {
			_, err := e.client.EnqueueMany(ctx, []retryq.NewTask{{Type: "a"}})
			return err
		},
		"SetType": func() error { return e.client.SetType(ctx, retryq.TypeConfig{Type: "a"}) },
	} {
		err := call()
		if err == nil {
			t.Errorf("%s on a closed store succeeded", what)
			continue
		}
		if d, ok := doubledContext(err.Error()); ok {
			t.Errorf("%s on a closed store = %q: says what failed twice (%q)", what, err, d)
		}
	}
}

// TestInvalidArgumentsNameTheCallAndTheGoField: an invalid argument of
// List, Get, Attempts, Cancel or Retry is an ErrInvalid error that says
// which call failed and names the field as Go spells it (ListParams'
// Limit, States, MaxBytes and Type), as Enqueue's and ListDead's do, not
// as the HTTP API's JSON does ("limit: ...", "state: ...", "id: ...").
// A cursor that is not text is one too (it was the store's own invalid
// argument error, which errors.Is did not match with ErrInvalid).
func TestInvalidArgumentsNameTheCallAndTheGoField(t *testing.T) {
	c := newIdleClient(t)
	ctx := boundedCtx(t)
	list := func(p retryq.ListParams) error { _, _, err := c.List(ctx, p); return err }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{list(retryq.ListParams{Limit: -1}), "list tasks: Limit: "},
		{list(retryq.ListParams{Limit: 1001}), "list tasks: Limit: "},
		{list(retryq.ListParams{MaxBytes: -1}), "list tasks: MaxBytes: "},
		{list(retryq.ListParams{States: []retryq.State{retryq.StateDead, "gone"}}), "list tasks: States: "},
		{list(retryq.ListParams{Type: "a b"}), "list tasks: Type: "},
		{list(retryq.ListParams{Cursor: "\xff"}), "list tasks: Cursor: "},
		{func() error { _, _, err := c.ListDead(ctx, retryq.DeadFilter{Cursor: "a\x00"}); return err }(), "list dead tasks: Cursor: "},
		{func() error { _, err := c.Get(ctx, ""); return err }(), "get task: id: "},
		{func() error { _, err := c.Attempts(ctx, ""); return err }(), "list attempts: id: "},
		{func() error { _, err := c.Cancel(ctx, strings.Repeat("x", 65)); return err }(), "cancel task: id: "},
		{func() error { _, err := c.Retry(ctx, "\xff"); return err }(), "retry task: id: "},
	} {
		if !errors.Is(tc.err, retryq.ErrInvalid) || !strings.HasPrefix(fmt.Sprint(tc.err), tc.want) {
			t.Errorf("got %v, want ErrInvalid starting %q", tc.err, tc.want)
		}
	}
}
