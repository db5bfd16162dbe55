package loadtest

import (
	"testing"
	"time"
)

// fakeClock is a clock that moves only when slept on or advanced.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) sleep(d time.Duration)   { c.t = c.t.Add(d) }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestPacedSendAfterStallIsStampedWithItsSlot pins the paced workload's
// open-loop schedule: after the producer stalls for 100 ms in one enqueue,
// the sends that fell due meanwhile go out at once but are stamped with
// their scheduled slots, so the wait counts as latency; the schedule does
// not shift, the rate over the run is still 200/s, and the stall shows in
// the pacing statistics.
func TestPacedSendAfterStallIsStampedWithItsSlot(t *testing.T) {
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: start}
	p := newPacer(start, 200) // one slot per 5 ms
	p.now, p.sleep = clk.now, clk.sleep
	const n = 40
	slept := 0
	p.sleep = func(d time.Duration) { slept++; clk.sleep(d) }
	for i := 0; i < n; i++ {
		slot := p.next(i)
		if want := start.Add(time.Duration(i) * 5 * time.Millisecond); !slot.Equal(want) {
			t.Fatalf("send %d stamped %s after start, want its slot %s", i, slot.Sub(start), want.Sub(start))
		}
		if lag := clk.now().Sub(slot); lag < 0 {
			t.Fatalf("send %d went out %s before its slot", i, -lag)
		}
		began, took := clk.now(), time.Duration(0)
		if i == 10 {
			took = 100 * time.Millisecond // this enqueue took 100 ms
		}
		clk.advance(took)
		p.sent(began, took)
	}
	got := p.result()
	// Slots 11..29 (55..145 ms) fall due during the stall, which ends at
	// 150 ms, slot 30's instant: 19 sends are an interval or more late.
	if got.Behind != 19 || got.MaxLag != 95*time.Millisecond {
		t.Errorf("behind %d, max lag %s; want 19, 95ms", got.Behind, got.MaxLag)
	}
	if stalled := start.Add(50 * time.Millisecond); got.Slowest != 100*time.Millisecond || !got.SlowestAt.Equal(stalled) {
		t.Errorf("slowest send %s at %s after start, want 100ms at 50ms", got.Slowest, got.SlowestAt.Sub(start))
	}
	if got.Rate != 200 || got.Target != 200 {
		t.Errorf("rate %.2f/s of %.0f/s, want 200 of 200", got.Rate, got.Target)
	}
	// Sends 1..10 and 31..39 wait for their slots; 11..30 are due already.
	if slept != 19 {
		t.Errorf("slept %d times, want 19", slept)
	}
}
