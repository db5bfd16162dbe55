package window

import (
	"fmt"
	"math"
	"math/big"
	"time"
)

// Counter keeps two running counts (A and B, e.g. calls and failures) per
// bucket over a sliding window of fixed length. A bucket is identified by
// its epoch (nanoseconds since the Unix epoch / bucket width, rounded
// down, for any date); the window at time t holds the buckets whose epochs
// are the last n ones up to t's. Times earlier than the latest seen are
// counted in the latest bucket: the window never moves backwards.
type Counter struct {
	width  int64
	slots  []Bucket
	latest int64
}

// Bucket is one bucket's counts.
type Bucket struct {
	Epoch int64
	A, B  int64
}

// MaxBuckets bounds the buckets of one window (and so its memory).
const MaxBuckets = 3600

// CheckSize reports the first problem with a window of the given length in
// n buckets, as the name of the config field at fault ("Window" or
// "Buckets") and the reason; field is "" when the size is valid for New.
func CheckSize(length time.Duration, n int) (field, reason string) {
	switch {
	case length <= 0:
		return "Window", fmt.Sprintf("must be > 0 (got %v)", length)
	case n < 1 || n > MaxBuckets:
		return "Buckets", fmt.Sprintf("must be between 1 and %d (got %d)", MaxBuckets, n)
	case length < time.Duration(n):
		return "Window", fmt.Sprintf("must be at least Buckets nanoseconds (got %v for %d buckets)", length, n)
	}
	return "", ""
}

// New returns a Counter for a window of the given length in n buckets. The
// caller guarantees length >= n > 0 (see CheckSize).
func New(length time.Duration, n int) Counter {
	return NewWidth(length/time.Duration(n), n)
}

// NewWidth returns a Counter of n buckets of the given width; the caller
// guarantees width > 0 and n > 0.
func NewWidth(width time.Duration, n int) Counter {
	return Counter{width: int64(width), slots: make([]Bucket, n), latest: math.MinInt64}
}

// Width returns the width of a bucket.
func (c *Counter) Width() time.Duration { return time.Duration(c.width) }

// Epoch returns the epoch of now's bucket: the newest bucket of the window
// ending at now (never earlier than the latest seen).
func (c *Counter) Epoch(now time.Time) int64 { return c.epoch(now) }

// Len returns the number of buckets.
func (c *Counter) Len() int { return len(c.slots) }

// epoch maps now to a bucket epoch, never going back.
func (c *Counter) epoch(now time.Time) int64 {
	e := epochOf(now, c.width)
	if e < c.latest {
		return c.latest
	}
	c.latest = e
	return e
}

func (c *Counter) slot(e int64) *Bucket {
	n := int64(len(c.slots))
	return &c.slots[((e%n)+n)%n]
}

// Add adds a and b to the bucket of now.
func (c *Counter) Add(now time.Time, a, b int64) {
	e := c.epoch(now)
	s := c.slot(e)
	if s.Epoch != e {
		*s = Bucket{Epoch: e}
	}
	s.A += a
	s.B += b
}

// Sums returns the totals of the window ending at now.
func (c *Counter) Sums(now time.Time) (a, b int64) {
	c.Each(now, func(_ time.Time, x Bucket) bool {
		a += x.A
		b += x.B
		return true
	})
	return a, b
}

// Each calls fn for every non-empty bucket in the window ending at now,
// oldest first, with the time at which that bucket leaves the window. It
// stops when fn returns false.
func (c *Counter) Each(now time.Time, fn func(expires time.Time, b Bucket) bool) {
	e := c.epoch(now)
	n := int64(len(c.slots))
	for ep := e - n + 1; ep <= e; ep++ {
		s := c.slot(ep)
		if s.Epoch != ep || (s.A == 0 && s.B == 0) {
			continue
		}
		if !fn(startOf(ep+n, c.width), *s) {
			return
		}
	}
}

// Reset empties the window.
func (c *Counter) Reset() { clear(c.slots) }

// maxEpoch bounds epochs (in absolute value) so that adding a window's
// bucket count to one cannot overflow.
const maxEpoch = 1 << 62

// fastSeconds bounds the Unix seconds whose nanoseconds fit an int64.
const fastSeconds = math.MaxInt64/1_000_000_000 - 1

// epochOf returns the nanoseconds from the Unix epoch to t divided by
// width, rounded down. t.UnixNano would wrap outside the years 1678-2262
// (the zero Time among them), so those times are computed with big
// integers.
func epochOf(t time.Time, width int64) int64 {
	if sec := t.Unix(); sec > -fastSeconds && sec < fastSeconds {
		ns := sec*1e9 + int64(t.Nanosecond())
		e := ns / width
		if ns%width < 0 {
			e--
		}
		return e
	}
	ns := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	ns.Add(ns, big.NewInt(int64(t.Nanosecond())))
	ns.Div(ns, big.NewInt(width)) // Euclidean: rounds down for width > 0
	switch {
	case !ns.IsInt64() && ns.Sign() > 0, ns.IsInt64() && ns.Int64() > maxEpoch:
		return maxEpoch
	case !ns.IsInt64(), ns.Int64() < -maxEpoch:
		return -maxEpoch
	}
	return ns.Int64()
}

// startOf returns the time at which the bucket of epoch e starts.
func startOf(e, width int64) time.Time {
	if e <= math.MaxInt64/width && e >= math.MinInt64/width {
		return time.Unix(0, e*width)
	}
	ns := new(big.Int).Mul(big.NewInt(e), big.NewInt(width))
	sec, nsec := ns.DivMod(ns, big.NewInt(1e9), new(big.Int))
	if !sec.IsInt64() || sec.Int64() > maxEpoch || sec.Int64() < -maxEpoch {
		// Far beyond any representable date: saturate.
		return time.Unix(int64(sec.Sign())*maxEpoch, 0)
	}
	return time.Unix(sec.Int64(), nsec.Int64())
}
