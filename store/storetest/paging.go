package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/retryq/retryq/store"
)

// CheckTaskPages lists the tasks p selects page by page, p.Limit at a time,
// from the first page to the last, and fails t unless their ids, in order,
// are want. A backend's own tests use it to compare a listing against a
// reference they computed (at most 2,500 pages are read).
func CheckTaskPages(ctx context.Context, t testing.TB, s store.Store, p store.ListParams, want []string) {
	t.Helper()
	var got []string
	p.Cursor = ""
	for page := 0; ; page++ {
		if page > 2500 {
			t.Fatalf("%v %q limit %d: paging does not end", p.States, p.Type, p.Limit)
		}
		ts, next, err := s.ListTasks(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range ts {
			got = append(got, task.ID)
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%v type %q limit %d: got %d tasks, want %d; they differ from the %dth on:\ngot  %v\nwant %v",
			p.States, p.Type, p.Limit, len(got), len(want), i+1, got[i:min(i+5, len(got))], want[i:min(i+5, len(want))])
	}
}
