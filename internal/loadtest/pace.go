package loadtest

import (
	"fmt"
	"time"
)

// PaceStats describe how closely a paced run kept its schedule.
type PaceStats struct {
	Target float64       // sends per second asked for; zero for unpaced runs
	Rate   float64       // sends per second achieved, first send to last
	Behind int           // sends made one interval or more after their slot
	MaxLag time.Duration // the longest delay of a send after its slot
	// Slowest is the longest send (enqueue call) and SlowestAt the wall
	// clock when it began: a lag comes from the send before it, and the
	// instant lets a stall be matched with the logs of the database, the
	// disk or the machine.
	Slowest   time.Duration
	SlowestAt time.Time
}

// String is empty for an unpaced run.
func (s PaceStats) String() string {
	if s.Target == 0 {
		return ""
	}
	return fmt.Sprintf(" [pace: %.1f/s of %.0f/s, %d sends an interval or more behind their slot, max lag %s, slowest send %s at %s]",
		s.Rate, s.Target, s.Behind, s.MaxLag.Round(10*time.Microsecond),
		s.Slowest.Round(10*time.Microsecond), s.SlowestAt.UTC().Format("15:04:05.000"))
}

// pacer spaces sends on a fixed open-loop schedule: send i belongs to the
// slot start + i×interval whatever happened before it. A send that falls
// behind (the producer was blocked in a slow enqueue, or woke late) goes
// out at once and is stamped with its slot, not with the late instant it
// left: the time it waited on the producer counts as latency instead of
// vanishing in the burst that catches up after a stall. PaceStats show how
// far behind the producer fell.
type pacer struct {
	start    time.Time
	interval time.Duration
	now      func() time.Time
	sleep    func(time.Duration)

	stats       PaceStats
	sends       int
	first, last time.Time
}

// newPacer returns a pacer of rate sends per second from start on the real
// clock.
func newPacer(start time.Time, rate float64) *pacer {
	return &pacer{start: start, interval: time.Duration(float64(time.Second) / rate),
		now: time.Now, sleep: time.Sleep, stats: PaceStats{Target: rate}}
}

// next waits for slot i (slots are taken in order from 0) and returns its
// instant, which is what the send is to be stamped with.
func (p *pacer) next(i int) time.Time {
	slot := p.start.Add(time.Duration(i) * p.interval)
	now := p.now()
	if d := slot.Sub(now); d > 0 {
		p.sleep(d)
		now = p.now()
	}
	lag := max(0, now.Sub(slot))
	p.stats.MaxLag = max(p.stats.MaxLag, lag)
	if lag >= p.interval {
		p.stats.Behind++
	}
	if p.sends == 0 {
		p.first = now
	}
	p.last = now
	p.sends++
	return slot
}

// sent records a send that began at began and took took.
func (p *pacer) sent(began time.Time, took time.Duration) {
	if took > p.stats.Slowest {
		p.stats.Slowest, p.stats.SlowestAt = took, began
	}
}

// result returns the pacing statistics of the sends so far.
func (p *pacer) result() PaceStats {
	s := p.stats
	if span := p.last.Sub(p.first); p.sends > 1 && span > 0 {
		s.Rate = float64(p.sends-1) / span.Seconds()
	}
	return s
}
