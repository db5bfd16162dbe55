package retry

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	fixed := Policy{Backoff: BackoffFixed, InitialDelay: 2 * time.Second, Jitter: JitterNone, MaxAttempts: 3, MaxDelay: 10 * time.Second}
	tests := []struct {
		name string
		p    Policy
		in   Input
		want Decision
	}{
		{"transient retried", fixed, Input{Attempt: 1, Now: now, Class: ClassTransient}, Decision{Retry: true, Delay: 2 * time.Second}},
		{"unknown retried", fixed, Input{Attempt: 2, Now: now, Class: ClassUnknown}, Decision{Retry: true, Delay: 2 * time.Second}},
		{"permanent stops", fixed, Input{Attempt: 1, Now: now, Class: ClassPermanent}, Decision{Stop: StopNonRetryable}},
		{"permanent beats max attempts", fixed, Input{Attempt: 3, Now: now, Class: ClassPermanent}, Decision{Stop: StopNonRetryable}},
		{"last attempt", fixed, Input{Attempt: 3, Now: now, Class: ClassTransient}, Decision{Stop: StopMaxAttempts}},
		{"override raises limit", fixed, Input{Attempt: 3, MaxAttempts: 4, Now: now}, Decision{Retry: true, Delay: 2 * time.Second}},
		{"retry-after wins", fixed, Input{Attempt: 1, Now: now, RetryAfter: 7 * time.Second}, Decision{Retry: true, Delay: 7 * time.Second}},
		{"retry-after capped", fixed, Input{Attempt: 1, Now: now, RetryAfter: time.Hour}, Decision{Retry: true, Delay: 10 * time.Second}},
		{"zero policy uses defaults", Policy{Jitter: JitterNone}, Input{Attempt: 2, Now: now}, Decision{Retry: true, Delay: 2 * time.Second}},
		{"window: first failure defaults to now", Policy{Jitter: JitterNone, RetryWindow: time.Second}, Input{Attempt: 1, Now: now}, Decision{Retry: true, Delay: time.Second}},
		{"window exceeded", Policy{Jitter: JitterNone, RetryWindow: time.Second}, Input{Attempt: 2, Now: now}, Decision{Stop: StopRetryWindow}},
		{"window counts retry-after", Policy{RetryWindow: 5 * time.Second}, Input{Attempt: 1, FirstFailure: now, Now: now, RetryAfter: 6 * time.Second}, Decision{Stop: StopRetryWindow}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Decide(tt.in, rand.New(rand.NewPCG(1, 2))); got != tt.want {
				t.Errorf("Decide(%+v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// badRand returns values outside [0, 1); Delay must stay in bounds anyway.
type badRand float64

func (b badRand) Float64() float64 { return float64(b) }

func TestDelayToleratesBadRand(t *testing.T) {
	p := DefaultPolicy()
	p.Backoff = BackoffDecorrelated
	for _, r := range []badRand{-1, 2, badRand(nanValue())} {
		for _, b := range []Backoff{BackoffExponential, BackoffDecorrelated} {
			p.Backoff = b
			for _, j := range []Jitter{JitterProportional, JitterFull, JitterEqual} {
				p.Jitter = j
				if d := p.Delay(3, time.Second, r); d < 0 || d > p.MaxDelay {
					t.Errorf("%s/%s rand %v: %v", b, j, r, d)
				}
			}
		}
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

func TestDecideAllocatesNothing(t *testing.T) {
	p := DefaultPolicy()
	p.RetryWindow = time.Hour
	p.RetryOn = []string{"503"}
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		_ = p.Decide(Input{Attempt: 3, FirstFailure: now, Now: now, Class: ClassTransient}, r)
		_ = p.Decide(Input{Attempt: 3, Now: now, Class: ClassTransient}, nil)
	})
	if allocs != 0 {
		t.Fatalf("Decide allocates %v times per run", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := DefaultPolicy()
	p.RetryWindow = time.Hour
	r := rand.New(rand.NewPCG(1, 2))
	first := time.Unix(1_700_000_000, 0)
	in := Input{Attempt: 3, FirstFailure: first, Now: first.Add(time.Minute), PrevDelay: 2 * time.Second, Class: ClassTransient}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.Attempt = 1 + i%4
		if d := p.Decide(in, r); !d.Retry {
			b.Fatal(d)
		}
	}
}

func BenchmarkDecideDecorrelated(b *testing.B) {
	p := DefaultPolicy()
	p.Backoff = BackoffDecorrelated
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(Input{Attempt: 2, Now: now, PrevDelay: 3 * time.Second, Class: ClassUnknown}, r)
	}
}
