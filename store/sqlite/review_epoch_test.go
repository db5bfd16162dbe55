package sqlite

import (
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestReviewEpochIsNotZero: the zero time.Time means "unset", but the
// legitimate instant 1970-01-01T00:00:00Z is stored as 0 micros and read
// back as the zero time (fromMicros(0) == time.Time{}), so a task whose
// RunAt is the Unix epoch comes back with no RunAt at all.
func TestReviewEpochIsNotZero(t *testing.T) {
	s := openTemp(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	epoch := time.Unix(0, 0).UTC()
	res, err := s.InsertTasks(t.Context(), store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "e", Type: "t", RunAt: epoch}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Task.RunAt.Equal(epoch) {
		t.Errorf("InsertTasks result RunAt = %v, want %v", res[0].Task.RunAt, epoch)
	}
	got, err := s.GetTask(t.Context(), "e")
	if err != nil {
		t.Fatal(err)
	}
	if !got.RunAt.Equal(epoch) {
		t.Errorf("GetTask RunAt = %v (IsZero=%v), want %v", got.RunAt, got.RunAt.IsZero(), epoch)
	}
}
