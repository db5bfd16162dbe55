package engine

import "testing"

// TestSinkPriorityAtTheBounds: the ordering priority after each failed
// attempt, for several max attempts and at the bounds of the priority
// range: it sinks by one per failure, never below -MaxPriority, and the
// attempt before the dead-letter queue runs at the task's own priority.
func TestSinkPriorityAtTheBounds(t *testing.T) {
	for _, c := range []struct {
		base, failed, max, want int
	}{
		{base: 5, failed: 1, max: 2, want: 5},                           // the last chance is the second attempt
		{base: 5, failed: 1, max: 3, want: 4},                           // sinks
		{base: 5, failed: 2, max: 3, want: 5},                           // last chance
		{base: 5, failed: 8, max: 10, want: -3},                         // sinks below zero
		{base: 5, failed: 9, max: 10, want: 5},                          // last chance
		{base: 5, failed: 50, max: 0, want: -45},                        // no attempt limit: sinks on
		{base: -MaxPriority, failed: 1, max: 3, want: -MaxPriority},     // clamped at the bottom
		{base: -MaxPriority + 1, failed: 5, max: 0, want: -MaxPriority}, // clamped
		{base: MaxPriority, failed: 1, max: 3, want: MaxPriority - 1},   // the top sinks too
		{base: MaxPriority, failed: 2, max: 3, want: MaxPriority},       // and comes back
		{base: 0, failed: 1 << 40, max: 0, want: -MaxPriority},          // a huge attempt count
	} {
		if got := sinkPriority(c.base, c.failed, c.max); got != c.want {
			t.Errorf("sinkPriority(%d, %d, %d) = %d; want %d", c.base, c.failed, c.max, got, c.want)
		}
	}
}
