package retry

import (
	"math"
	"math/rand/v2"
	"time"
)

// Rand is a source of uniform random numbers in [0, 1). *math/rand/v2.Rand
// satisfies it. A nil Rand means the goroutine-safe global source of
// math/rand/v2.
type Rand interface {
	Float64() float64
}

// random draws from r, or from the global source when r is nil, and keeps
// the result in [0, 1] even for a misbehaving r.
func random(r Rand) float64 {
	var x float64
	if r == nil {
		x = rand.Float64()
	} else {
		x = r.Float64()
	}
	if !(x >= 0) { // also NaN
		return 0
	}
	return min(x, 1)
}

// Delay returns the delay before the attempt after the n-th failed attempt
// (n is 1-based), for the strategy, cap and jitter of p.WithDefaults().
// prev is the previous delay, used by decorrelated jitter (0 when there is
// none). The result is always within [0, MaxDelay]; decorrelated delays are
// within [InitialDelay, MaxDelay]. Delay does not allocate.
func (p *Policy) Delay(n int, prev time.Duration, r Rand) time.Duration {
	q := p.WithDefaults()
	return q.delay(n, prev, r)
}

// delay is Delay for a policy that already has its defaults.
func (p *Policy) delay(n int, prev time.Duration, r Rand) time.Duration {
	if p.MaxDelay <= 0 {
		return 0
	}
	n = max(n, 1)
	capNs := float64(p.MaxDelay)
	if p.Backoff == BackoffDecorrelated {
		lo := float64(max(p.InitialDelay, 0))
		if prev <= 0 {
			prev = p.InitialDelay
		}
		hi := max(3*float64(prev), lo)
		return clampDuration(lo+random(r)*(hi-lo), p.MaxDelay)
	}
	d := min(p.base(n), capNs) // min keeps NaN out: min(NaN, x) is NaN, handled by clamp
	switch p.Jitter {
	case JitterProportional:
		f := p.JitterFraction
		d *= 1 + f*(2*random(r)-1)
	case JitterFull:
		d *= random(r)
	case JitterEqual:
		d = d/2 + random(r)*d/2
	}
	return clampDuration(d, p.MaxDelay)
}

// base is the un-jittered, uncapped delay in nanoseconds after the n-th
// failed attempt. It may be +Inf for huge n; never negative for a valid
// policy.
func (p *Policy) base(n int) float64 {
	init := float64(p.InitialDelay)
	switch p.Backoff {
	case BackoffFixed:
		return init
	case BackoffLinear:
		return init * float64(n)
	default: // exponential
		steps := n - 1
		if k := p.MaxDoublings; k > 0 && steps > k {
			top := init * math.Pow(p.Multiplier, float64(k))
			return top * float64(steps-k+1)
		}
		return init * math.Pow(p.Multiplier, float64(steps))
	}
}

// clampDuration converts nanoseconds to a Duration within [0, limit],
// mapping NaN to 0.
func clampDuration(ns float64, limit time.Duration) time.Duration {
	switch {
	case !(ns > 0): // also NaN
		return 0
	case ns >= float64(limit):
		return limit
	default:
		return time.Duration(ns)
	}
}
