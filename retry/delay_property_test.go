package retry

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const propertySeeds = 2000

// randomPolicy draws a valid policy with defaults applied.
func randomPolicy(rng *rand.Rand) Policy {
	backoffs := []Backoff{BackoffFixed, BackoffLinear, BackoffExponential, BackoffDecorrelated}
	jitters := []Jitter{JitterNone, JitterProportional, JitterFull, JitterEqual}
	initial := time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Second)))
	p := Policy{
		Backoff:        backoffs[rng.IntN(len(backoffs))],
		InitialDelay:   initial,
		Multiplier:     1 + 3*rng.Float64(),
		MaxDelay:       initial + time.Duration(rng.Int64N(int64(time.Hour))),
		MaxDoublings:   rng.IntN(6),
		Jitter:         jitters[rng.IntN(len(jitters))],
		JitterFraction: 0.01 + 0.99*rng.Float64(),
		MaxAttempts:    1 + rng.IntN(20),
	}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return p.WithDefaults()
}

// attemptNumbers covers ordinary attempts and ones large enough to overflow.
var attemptNumbers = func() []int {
	ns := []int{1000, 1 << 20, math.MaxInt32, math.MaxInt - 1}
	for n := 1; n <= 64; n++ {
		ns = append(ns, n)
	}
	return ns
}()

func TestPropertyDelaysWithinBounds(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		p := randomPolicy(rng)
		prev := time.Duration(0)
		for _, n := range attemptNumbers {
			d := p.Delay(n, prev, rng)
			if d < 0 || d > p.MaxDelay {
				t.Fatalf("seed %d: %+v: Delay(%d) = %v outside [0, %v]", seed, p, n, d, p.MaxDelay)
			}
			if p.Backoff == BackoffDecorrelated && d < p.InitialDelay {
				t.Fatalf("seed %d: decorrelated Delay(%d) = %v below initial %v", seed, n, d, p.InitialDelay)
			}
			prev = d
		}
	}
}

func TestPropertyJitterBands(t *testing.T) {
	const slack = 2 // ns of float rounding
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		p := randomPolicy(rng)
		if p.Backoff == BackoffDecorrelated {
			p.Backoff = BackoffExponential
		}
		plain := p
		plain.Jitter = JitterNone
		for n := 1; n <= 30; n++ {
			base := float64(plain.Delay(n, 0, nil))
			d := float64(p.Delay(n, 0, rng))
			lo, hi := base, base
			switch p.Jitter {
			case JitterProportional:
				lo, hi = base*(1-p.JitterFraction), min(base*(1+p.JitterFraction), float64(p.MaxDelay))
			case JitterFull:
				lo = 0
			case JitterEqual:
				lo = base / 2
			}
			if d < lo-slack || d > hi+slack {
				t.Fatalf("seed %d: jitter %s fraction %g: Delay(%d) = %v outside [%v, %v] (base %v)",
					seed, p.Jitter, p.JitterFraction, n, time.Duration(d), time.Duration(lo), time.Duration(hi), time.Duration(base))
			}
		}
	}
}

func TestPropertyDecorrelatedRange(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		p := randomPolicy(rng)
		p.Backoff = BackoffDecorrelated
		prev := time.Duration(0)
		for n := 1; n <= 30; n++ {
			d := p.Delay(n, prev, rng)
			upper := min(max(3*prevOrInitial(prev, p.InitialDelay), p.InitialDelay), p.MaxDelay)
			if d < p.InitialDelay || d > upper {
				t.Fatalf("seed %d: decorrelated Delay(%d, prev %v) = %v outside [%v, %v]", seed, n, prev, d, p.InitialDelay, upper)
			}
			prev = d
		}
	}
}

func prevOrInitial(prev, initial time.Duration) time.Duration {
	if prev <= 0 {
		return initial
	}
	return prev
}

func TestPropertyExponentialMonotoneBeforeCap(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 4))
		p := randomPolicy(rng)
		p.Backoff, p.Jitter, p.MaxDoublings = BackoffExponential, JitterNone, 0
		last := time.Duration(0)
		for n := 1; n <= 64; n++ {
			d := p.Delay(n, 0, nil)
			if d < last {
				t.Fatalf("seed %d: Delay(%d) = %v < Delay(%d) = %v", seed, n, d, n-1, last)
			}
			want := float64(p.InitialDelay) * math.Pow(p.Multiplier, float64(n-1))
			if want < float64(p.MaxDelay) && math.Abs(float64(d)-want) > 1 {
				t.Fatalf("seed %d: Delay(%d) = %v, want %v", seed, n, d, time.Duration(want))
			}
			last = d
		}
	}
}

func TestMaxDoublingsCloudTasksExample(t *testing.T) {
	p := Policy{Backoff: BackoffExponential, InitialDelay: 10 * time.Second, Multiplier: 2,
		MaxDelay: 300 * time.Second, MaxDoublings: 3, Jitter: JitterNone}
	want := []time.Duration{10, 20, 40, 80, 160, 240, 300, 300}
	for i, w := range want {
		if got := p.Delay(i+1, 0, nil); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
}

func TestPropertyMaxDoublingsLinearAfterK(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		p := randomPolicy(rng)
		p.Backoff, p.Jitter = BackoffExponential, JitterNone
		p.MaxDoublings = 1 + rng.IntN(5)
		p.MaxDelay = math.MaxInt64 / 4 // keep the cap out of the way
		k := p.MaxDoublings
		top := p.Delay(k+1, 0, nil) // delay after k growth steps
		for n := k + 2; n <= k+20; n++ {
			step := p.Delay(n, 0, nil) - p.Delay(n-1, 0, nil)
			if d := step - top; d < -2 || d > 2 {
				t.Fatalf("seed %d: k=%d step at n=%d is %v, want %v", seed, k, n, step, top)
			}
		}
	}
}

func TestPropertyExhaustionExact(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 6))
		p := randomPolicy(rng)
		now := time.Unix(1_700_000_000, 0)
		for n := 1; n <= p.MaxAttempts; n++ {
			d := p.Decide(Input{Attempt: n, Now: now, Class: ClassTransient}, rng)
			if wantRetry := n < p.MaxAttempts; d.Retry != wantRetry {
				t.Fatalf("seed %d: max %d attempt %d: retry=%v, want %v", seed, p.MaxAttempts, n, d.Retry, wantRetry)
			}
			if !d.Retry && (d.Stop != StopMaxAttempts || d.Delay != 0) {
				t.Fatalf("seed %d: stop decision %+v", seed, d)
			}
		}
		override := 1 + rng.IntN(10)
		if d := p.Decide(Input{Attempt: override, MaxAttempts: override, Class: ClassUnknown}, rng); d.Stop != StopMaxAttempts {
			t.Fatalf("seed %d: override %d: %+v", seed, override, d)
		}
		if override > 1 {
			if d := p.Decide(Input{Attempt: override - 1, MaxAttempts: override, Class: ClassUnknown}, rng); !d.Retry {
				t.Fatalf("seed %d: override %d attempt %d: %+v", seed, override, override-1, d)
			}
		}
	}
}

func TestPropertyRetryWindowExact(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		p := randomPolicy(rng)
		p.Backoff, p.Jitter, p.MaxAttempts = BackoffFixed, JitterNone, math.MaxInt
		p.RetryWindow = p.InitialDelay + time.Duration(rng.Int64N(int64(time.Hour)))
		first := time.Unix(1_700_000_000, 0)
		edge := first.Add(p.RetryWindow - p.InitialDelay) // the last moment a retry fits
		in := Input{Attempt: 3, FirstFailure: first, Now: edge, Class: ClassTransient}
		if d := p.Decide(in, rng); !d.Retry || d.Delay != p.InitialDelay {
			t.Fatalf("seed %d: at the edge: %+v", seed, d)
		}
		in.Now = edge.Add(time.Nanosecond)
		if d := p.Decide(in, rng); d.Retry || d.Stop != StopRetryWindow {
			t.Fatalf("seed %d: past the edge: %+v", seed, d)
		}
	}
}

func TestPropertyRetryAfterOverridesAndIsCapped(t *testing.T) {
	for seed := uint64(0); seed < propertySeeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 8))
		p := randomPolicy(rng)
		p.MaxAttempts = 2
		ra := time.Duration(1 + rng.Int64N(int64(2*p.MaxDelay)))
		d := p.Decide(Input{Attempt: 1, Class: ClassTransient, RetryAfter: ra}, rng)
		if !d.Retry || d.Delay != min(ra, p.MaxDelay) {
			t.Fatalf("seed %d: RetryAfter %v cap %v: %+v", seed, ra, p.MaxDelay, d)
		}
	}
}
