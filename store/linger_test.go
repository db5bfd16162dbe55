package store

import (
	"testing"
	"time"
)

func TestYieldUntil(t *testing.T) {
	calls := 0
	YieldUntil(func() bool { calls++; return true }, time.Hour)
	if calls != 1 {
		t.Errorf("condition already true: %d calls, want 1", calls)
	}

	calls = 0
	YieldUntil(func() bool { calls++; return calls == 5 }, time.Hour)
	if calls != 5 {
		t.Errorf("condition true at the 5th call: %d calls, want 5", calls)
	}

	calls = 0
	YieldUntil(func() bool { calls++; return false }, 0)
	if calls > 2 {
		t.Errorf("zero bound: %d calls, want at most 2", calls)
	}

	calls = 0
	YieldUntil(func() bool { calls++; return false }, time.Hour)
	if calls > 10_001 {
		t.Errorf("never true: %d calls, want the 10,000-yield bound", calls)
	}
}

func TestLingerTargetCountsInserts(t *testing.T) {
	ins, out, fetch := &w{"i", 'i'}, &w{"o", 'o'}, &w{"f", 'f'}
	for _, c := range []struct {
		group  []*w
		queued int
		want   int
	}{
		{nil, 3, 0},
		{[]*w{out, fetch}, 3, 0},              // no inserts: no wait
		{[]*w{ins}, 0, 1},                     // a lone producer: YieldUntil is skipped for 1
		{[]*w{out, out, ins, ins, ins}, 2, 5}, // released outcomes do not count
	} {
		if got := LingerTarget(c.group, c.queued, isInsert); got != c.want {
			t.Errorf("LingerTarget(%s, %d queued) = %d, want %d", names(c.group), c.queued, got, c.want)
		}
	}
}
