package window

import (
	"testing"
	"time"
)

func TestCounterSlides(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := New(time.Minute, 6) // 10s buckets
	c.Add(t0, 1, 0)
	c.Add(t0.Add(15*time.Second), 1, 1)
	c.Add(t0.Add(5*time.Second), 0, 1) // earlier than latest: lands in the latest bucket
	if a, b := c.Sums(t0.Add(20 * time.Second)); a != 2 || b != 2 {
		t.Fatalf("sums %d %d", a, b)
	}
	var expiries []time.Duration
	c.Each(t0.Add(20*time.Second), func(at time.Time, b Bucket) bool {
		expiries = append(expiries, at.Sub(t0))
		return true
	})
	if len(expiries) != 2 || expiries[0] != time.Minute || expiries[1] != 70*time.Second {
		t.Fatalf("expiries %v", expiries)
	}
	if a, b := c.Sums(t0.Add(61 * time.Second)); a != 1 || b != 2 {
		t.Fatalf("after the first bucket left: %d %d", a, b)
	}
	if a, b := c.Sums(t0.Add(10 * time.Minute)); a != 0 || b != 0 {
		t.Fatalf("long after: %d %d", a, b)
	}
	c.Add(t0.Add(10*time.Minute), 5, 5)
	c.Reset()
	if a, _ := c.Sums(t0.Add(10 * time.Minute)); a != 0 || c.Len() != 6 {
		t.Fatal("reset")
	}
}

// TestCounterSlidesAtAnyTime: the window slides the same way whatever the
// date. Epochs came from UnixNano, which wraps outside 1678-2262, and the
// latest epoch started at 0 with division truncating toward zero, so every
// time before 1970 (a fake clock starting at the zero Time, say) landed in
// one bucket that never left the window.
func TestCounterSlidesAtAnyTime(t *testing.T) {
	starts := []time.Time{
		{}, // the zero Time
		time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-10, 0), // buckets either side of the Unix epoch
		time.Unix(1_700_000_000, 0),
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, start := range starts {
		c := New(time.Minute, 6) // 10s buckets
		c.Add(start, 1, 0)
		c.Add(start.Add(10*time.Second), 1, 0)
		if a, _ := c.Sums(start.Add(10 * time.Second)); a != 2 {
			t.Errorf("%v: %d in the window, want 2", start, a)
		}
		var expiries []time.Duration
		c.Each(start.Add(10*time.Second), func(at time.Time, _ Bucket) bool {
			expiries = append(expiries, at.Sub(start))
			return true
		})
		if len(expiries) != 2 || expiries[0] != time.Minute || expiries[1] != 70*time.Second {
			t.Errorf("%v: expiries %v, want [1m 1m10s]", start, expiries)
		}
		if a, _ := c.Sums(start.Add(time.Minute - time.Nanosecond)); a != 2 {
			t.Errorf("%v: %d in the window just before the first bucket leaves, want 2", start, a)
		}
		if a, _ := c.Sums(start.Add(time.Minute)); a != 1 {
			t.Errorf("%v: %d in the window as the first bucket leaves, want 1", start, a)
		}
		// A jump of centuries forward empties the window, and it slides on.
		far := start.AddDate(500, 0, 0)
		c.Add(far, 1, 0)
		if a, _ := c.Sums(far); a != 1 {
			t.Errorf("%v: %d in the window 500 years on, want 1", start, a)
		}
		if a, _ := c.Sums(far.Add(time.Minute)); a != 0 {
			t.Errorf("%v: %d in the window a minute after, want 0", start, a)
		}
	}
}

// TestHugeBuckets: a bucket's expiry is not wrapped around when its
// nanoseconds overflow an int64 (buckets of 200 years, say).
func TestHugeBuckets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewWidth(200*365*24*time.Hour, 2)
	c.Add(now, 1, 0)
	n := 0
	c.Each(now, func(at time.Time, _ Bucket) bool {
		n++
		if !at.After(now) || at.After(now.AddDate(400, 0, 0)) {
			t.Errorf("expires at %v, want within 400 years after %v", at, now)
		}
		return true
	})
	if n != 1 {
		t.Fatalf("%d buckets, want 1", n)
	}
}
