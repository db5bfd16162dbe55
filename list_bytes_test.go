package retryq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/retryq/retryq"
)

// TestClientListsPageByPayloadBytes: Client.List and Client.ListDead honour
// MaxBytes (a page ends before the task that would take its payloads past
// it, with at least one task, and the cursors lead through every task
// once) and refuse a negative one naming the Go field.
func TestClientListsPageByPayloadBytes(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(1)})
	ctx := context.Background()
	e.mux.HandleFunc("doomed", func(context.Context, *retryq.Task) error { return retryq.Permanent(errors.New("no")) })
	var live []string
	for range 5 {
		res, err := e.client.Enqueue(ctx, "live", strings.Repeat("x", 998)) // 1,000 bytes of JSON
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, res.Task.ID)
	}
	e.startWorker(retryq.WorkerConfig{Types: []string{"doomed"}})
	dead := deadTasks(t, e, "E1", "doomed", "doomed", "doomed") // {"code":"E1"}: 13 bytes

	// pages pages through a listing and returns each page's ids.
	pages := func(what string, list func(cursor string) ([]retryq.TaskInfo, string, error)) [][]string {
		t.Helper()
		var out [][]string
		cursor := ""
		for range 20 {
			ts, next, err := list(cursor)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var ids []string
			for _, ti := range ts {
				ids = append(ids, ti.ID)
			}
			out = append(out, ids)
			if next == "" {
				return out
			}
			if len(ts) == 0 || next != ts[len(ts)-1].ID {
				t.Fatalf("%s: page %v has cursor %q, want its last id", what, ids, next)
			}
			cursor = next
		}
		t.Fatalf("%s: paging does not end", what)
		return nil
	}
	got := pages("List", func(cursor string) ([]retryq.TaskInfo, string, error) {
		return e.client.List(ctx, retryq.ListParams{Type: "live", MaxBytes: 2500, Cursor: cursor})
	})
	want := [][]string{{live[4], live[3]}, {live[2], live[1]}, {live[0]}}
	if !equalPages(got, want) {
		t.Errorf("List of 1,000-byte payloads by 2,500 bytes = %v, want %v", got, want)
	}
	got = pages("ListDead", func(cursor string) ([]retryq.TaskInfo, string, error) {
		return e.client.ListDead(ctx, retryq.DeadFilter{MaxBytes: 26, Cursor: cursor})
	})
	want = [][]string{{dead[2], dead[1]}, {dead[0]}}
	if !equalPages(got, want) {
		t.Errorf("ListDead of 13-byte payloads by 26 bytes = %v, want %v", got, want)
	}
	got = pages("List", func(cursor string) ([]retryq.TaskInfo, string, error) {
		return e.client.List(ctx, retryq.ListParams{Type: "live", Cursor: cursor})
	})
	if len(got) != 1 || len(got[0]) != 5 {
		t.Errorf("List under the default bound = %v, want one page of 5", got)
	}

	if _, _, err := e.client.List(ctx, retryq.ListParams{MaxBytes: -1}); !errors.Is(err, retryq.ErrInvalid) {
		t.Errorf("List with MaxBytes -1 = %v, want ErrInvalid", err)
	}
	if _, _, err := e.client.ListDead(ctx, retryq.DeadFilter{MaxBytes: -1}); !errors.Is(err, retryq.ErrInvalid) ||
		!strings.Contains(err.Error(), "MaxBytes: ") {
		t.Errorf("ListDead with MaxBytes -1 = %v, want ErrInvalid naming MaxBytes", err)
	}
}

func equalPages(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], ",") != strings.Join(b[i], ",") {
			return false
		}
	}
	return true
}
