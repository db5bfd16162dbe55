package outage

import (
	"testing"
	"time"
)

// TestTrackerRules: the first failure of an outage warns, the next ones
// do not until Every has passed since the last warning (then a reminder);
// an outage that comes back within Every of the last warning is not
// warned about, nor is its end; one that comes back later is; a clock
// that went back before the last warning warns again rather than never.
func TestTrackerRules(t *testing.T) {
	var tr Tracker
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add
	check := func(now time.Duration, want Step, wantFailures int) {
		t.Helper()
		if step, n, _ := tr.Failure(at(now)); step != want || n != wantFailures {
			t.Fatalf("failure at %v: step %d, %d failures; want %d, %d", now, step, n, want, wantFailures)
		}
	}
	end := func(now time.Duration, wantFailures int, wantLogged bool) {
		t.Helper()
		if n, _, logged := tr.Success(at(now)); n != wantFailures || logged != wantLogged {
			t.Fatalf("success at %v: %d failures, logged %v; want %d, %v", now, n, logged, wantFailures, wantLogged)
		}
	}
	end(0, 0, false)
	check(0, First, 1)
	check(time.Second, Again, 2)
	check(59*time.Second, Again, 3)
	check(time.Minute, Reminder, 4)
	end(61*time.Second, 4, true)
	if tr.Down() {
		t.Fatal("down after a success")
	}
	// Flaps within the minute of the last warning: nothing above Debug.
	for i := range 10 {
		d := 62*time.Second + time.Duration(i)*time.Second
		check(d, Again, 1)
		end(d, 1, false)
	}
	check(2*time.Minute, First, 1)
	end(2*time.Minute, 1, true)
	// The clock went back before the last warning.
	check(time.Second, First, 1)
}
