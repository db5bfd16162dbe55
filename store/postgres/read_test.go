package postgres

import (
	"math"
	"testing"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestListWithTheLargestLimit: a list whose Limit is the largest int
// returns every task, as any limit above the number of tasks does. Its
// candidates' count, Limit+1, wrapped around to a negative LIMIT, which
// the server refused as invalid input.
func TestListWithTheLargestLimit(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	leased(t, s, "m", 2, t0)
	got, cursor, err := s.ListTasks(ctx, store.ListParams{Limit: math.MaxInt})
	if err != nil || len(got) != 2 || cursor != "" {
		t.Fatalf("ListTasks(Limit: MaxInt) = %d tasks, cursor %q, %v; want both tasks", len(got), cursor, err)
	}
	got, cursor, err = s.ListTasks(ctx, store.ListParams{Limit: math.MaxInt, Cursor: "m000001"})
	if err != nil || len(got) != 1 || got[0].ID != "m000000" || cursor != "" {
		t.Fatalf("ListTasks(Limit: MaxInt, after m000001) = %v, cursor %q, %v; want m000000", got, cursor, err)
	}
}
