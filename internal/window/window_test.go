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
