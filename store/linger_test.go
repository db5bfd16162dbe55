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
