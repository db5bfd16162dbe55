package budget

import (
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0) // on a whole second, so buckets align

func mustNew(t testing.TB, cfg Config) *Budget {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRetriesPerMinute(t *testing.T) {
	b := mustNew(t, Config{RetriesPerMinute: 6})
	for i := 0; i < 6; i++ {
		if ok, _ := b.AllowRetry(t0); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	ok, next := b.AllowRetry(t0)
	if ok || !next.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("7th retry: %v, next %v", ok, next.Sub(t0))
	}
	if ok, _ := b.AllowRetry(next.Add(-time.Millisecond)); ok {
		t.Fatal("allowed before next")
	}
	if ok, _ := b.AllowRetry(next); !ok {
		t.Fatal("refused at next")
	}
	if ok, n := b.AllowRetry(next); ok || !n.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after spending the refill: %v %v", ok, n.Sub(t0))
	}
	// The bucket never holds more than a minute's worth.
	if s := b.Stats(t0.Add(time.Hour)); s.RateTokens != 6 {
		t.Fatalf("tokens after an hour: %v", s.RateTokens)
	}
}

func TestRatioOfFirstAttempts(t *testing.T) {
	// Reserve 0.1/s × 10s = 1 retry; each first attempt deposits 0.5.
	b := mustNew(t, Config{RetryRatio: 0.5, MinRetriesPerSecond: 0.1, Window: 10 * time.Second, Buckets: 10})
	for i := 0; i < 10; i++ {
		b.RecordAttempt(t0)
	}
	for i := 0; i < 6; i++ {
		if ok, _ := b.AllowRetry(t0); !ok {
			t.Fatalf("retry %d refused with balance %+v", i, b.Stats(t0))
		}
	}
	// The deposits leave the window at +10s, the withdrawals a bucket
	// (1s) later.
	ok, next := b.AllowRetry(t0)
	if ok || !next.Equal(t0.Add(11*time.Second)) {
		t.Fatalf("exhausted: %v next %v", ok, next.Sub(t0))
	}
	if ok, _ := b.AllowRetry(next.Add(-time.Nanosecond)); ok {
		t.Fatal("allowed before next")
	}
	if ok, _ := b.AllowRetry(next); !ok {
		t.Fatal("refused at next")
	}
}

func TestRatioNextSkipsDeposits(t *testing.T) {
	// Deposits expire before the withdrawals do, so the balance first drops
	// further; the next retry is allowed only when the withdrawals expire.
	b := mustNew(t, Config{RetryRatio: 1, MinRetriesPerSecond: 0.1, Window: 10 * time.Second, Buckets: 10})
	for i := 0; i < 5; i++ {
		b.RecordAttempt(t0)
	}
	at := t0.Add(5 * time.Second)
	for i := 0; i < 6; i++ {
		if ok, _ := b.AllowRetry(at); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	if ok, next := b.AllowRetry(at); ok || !next.Equal(t0.Add(16*time.Second)) {
		t.Fatalf("next = %v, want +16s", next.Sub(t0))
	}
}

func TestRatioWithoutFloor(t *testing.T) {
	b := mustNew(t, Config{RetryRatio: 0.2})
	if ok, next := b.AllowRetry(t0); ok || !next.IsZero() {
		t.Fatalf("no first attempts: %v %v", ok, next)
	}
	for i := 0; i < 5; i++ {
		b.RecordAttempt(t0)
	}
	if ok, _ := b.AllowRetry(t0); !ok {
		t.Fatal("5 first attempts at 20% should allow one retry")
	}
}

func TestBothRules(t *testing.T) {
	b := mustNew(t, Config{RetriesPerMinute: 60, RetryRatio: 0.1, MinRetriesPerSecond: 0.2, Window: 10 * time.Second})
	// The ratio reserve (2 retries) runs out before the rate bucket (60).
	b.AllowRetry(t0)
	b.AllowRetry(t0)
	if ok, next := b.AllowRetry(t0); ok || !next.Equal(t0.Add(11*time.Second)) {
		t.Fatalf("ratio rule: %v %v", ok, next.Sub(t0))
	}
	// Now the rate rule: 60 tokens, spend them with plenty of first attempts.
	b = mustNew(t, Config{RetriesPerMinute: 60, RetryRatio: 1, Window: 10 * time.Second})
	for i := 0; i < 1000; i++ {
		b.RecordAttempt(t0)
	}
	for i := 0; i < 60; i++ {
		b.AllowRetry(t0)
	}
	if ok, next := b.AllowRetry(t0); ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("rate rule: %v %v", ok, next.Sub(t0))
	}
}

// TestNextIsExact replays random traffic and checks, at every refusal,
// that a retry is refused just before the promised time and allowed at it.
func TestNextIsExact(t *testing.T) {
	type event struct {
		at    time.Time
		first bool
	}
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		cfg := Config{
			RetriesPerMinute:    rng.IntN(40),
			RetryRatio:          rng.Float64(),
			MinRetriesPerSecond: rng.Float64() * 2,
			Window:              time.Duration(1+rng.IntN(20)) * time.Second,
			Buckets:             1 + rng.IntN(20),
		}
		replay := func(events []event) *Budget {
			b := mustNew(t, cfg)
			for _, e := range events {
				if e.first {
					b.RecordAttempt(e.at)
				} else {
					b.AllowRetry(e.at)
				}
			}
			return b
		}
		b := mustNew(t, cfg)
		var events []event
		now := t0
		for i := 0; i < 100; i++ {
			now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
			if rng.IntN(3) == 0 {
				b.RecordAttempt(now)
				events = append(events, event{now, true})
				continue
			}
			ok, next := b.AllowRetry(now)
			events = append(events, event{now, false})
			if ok || next.IsZero() {
				continue
			}
			if !next.After(now) {
				t.Fatalf("seed %d: refused at %v but next is %v", seed, now, next)
			}
			if ok, _ := replay(events).AllowRetry(next.Add(-time.Nanosecond)); ok {
				t.Fatalf("seed %d %+v: allowed before next %v (now %v)", seed, cfg, next.Sub(t0), now.Sub(t0))
			}
			if ok, _ := replay(events).AllowRetry(next); !ok {
				t.Fatalf("seed %d %+v: refused at next %v", seed, cfg, next.Sub(t0))
			}
		}
	}
}

func TestConfig(t *testing.T) {
	if d := (Config{}).WithDefaults(); d != DefaultConfig() {
		t.Fatalf("zero config defaults to %+v", d)
	}
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{RetriesPerMinute: -1}, "RetriesPerMinute"},
		{Config{RetryRatio: -0.1}, "RetryRatio"},
		{Config{MinRetriesPerSecond: -1}, "MinRetriesPerSecond"},
		{Config{Window: -1}, "Window"},
		{Config{Buckets: 4000}, "Buckets"},
		{Config{Window: 5, Buckets: 10}, "Window"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "budget config: "+tt.field+":") || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want field %s", tt.cfg, err, tt.field)
		}
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("New accepted %+v", tt.cfg)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	b := mustNew(t, Config{RetriesPerMinute: 100, RetryRatio: 0.5, MinRetriesPerSecond: 1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				b.RecordAttempt(t0)
				if ok, _ := b.AllowRetry(t0); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 100 { // the rate rule's 100 tokens; the ratio rule has room for 1010
		t.Fatalf("allowed %d retries, want 100", allowed)
	}
}

func BenchmarkBudget(b *testing.B) {
	bud := mustNew(b, Config{RetriesPerMinute: 1 << 20, RetryRatio: 0.2, MinRetriesPerSecond: 10})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		bud.RecordAttempt(now)
		bud.AllowRetry(now)
	}
}

// After the clock steps back, a refused retry's next is still a time at
// which the retry is allowed: the rate rule refills from the latest retry
// it allowed, not from the earlier now.
func TestNextAfterClockStepsBack(t *testing.T) {
	b := mustNew(t, Config{RetriesPerMinute: 6})
	late := t0.Add(time.Minute)
	b.AllowRetry(t0)         // the rule starts refilling from t0
	for i := 0; i < 6; i++ { // the bucket is full again at late; empty it
		if ok, _ := b.AllowRetry(late); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	ok, next := b.AllowRetry(t0.Add(30 * time.Second)) // the clock stepped back 30s
	if ok {
		t.Fatal("allowed with an empty bucket")
	}
	if !next.Equal(late.Add(10 * time.Second)) {
		t.Fatalf("next = +%v, want +%v", next.Sub(t0), late.Add(10*time.Second).Sub(t0))
	}
	if ok, _ := b.AllowRetry(next); !ok {
		t.Fatal("refused at next")
	}
}

// TestRatioRuleHoldsOverAnyWindow: the ratio rule's floor bounds the
// retries of any interval one Window long, wherever it starts. Withdrawals
// used to expire with their bucket, so retries made at the end of one
// bucket left the window up to a bucket early: with a floor of 10 per 10s,
// 10 retries at +0.999s and 10 more at +10s were both allowed (20 within
// 9.001s), and with one bucket the same doubling took a nanosecond.
func TestRatioRuleHoldsOverAnyWindow(t *testing.T) {
	for _, buckets := range []int{1, 3, 10} {
		b := mustNew(t, Config{RetryRatio: 0.1, MinRetriesPerSecond: 1, Window: 10 * time.Second, Buckets: buckets})
		var allowed []time.Time
		// Ask often, just before and at bucket edges, for 60 s.
		for ms := 0; ms <= 60_000; ms += 1 {
			now := t0.Add(time.Duration(ms) * time.Millisecond)
			if ms%1000 != 999 && ms%1000 != 0 && ms%137 != 0 {
				continue
			}
			if ok, _ := b.AllowRetry(now); ok {
				allowed = append(allowed, now)
			}
		}
		for i := range allowed {
			n := 0
			for j := i; j < len(allowed) && allowed[j].Sub(allowed[i]) < 10*time.Second; j++ {
				n++
			}
			if n > 10 {
				t.Fatalf("%d buckets: %d retries within 10s from %v (floor 10 per 10s)", buckets, n, allowed[i].Sub(t0))
			}
		}
		// A withdrawal lasts up to a bucket more than Window, so with one
		// bucket the rule allows about half the floor over time.
		if len(allowed) < 25 {
			t.Fatalf("%d buckets: only %d retries in 60s; the floor allows about 10 per 10s", buckets, len(allowed))
		}
	}
}

// TestInjectedClockFromZeroTime: a fake clock starting at the zero Time
// works like any other. The rate rule took a zero last refill time for
// "never refilled" and dropped the first interval's tokens, and the ratio
// rule's window never slid before 1970 and promised a next time in 1970.
func TestInjectedClockFromZeroTime(t *testing.T) {
	var zero time.Time
	t.Run("rate", func(t *testing.T) {
		b := mustNew(t, Config{RetriesPerMinute: 6})
		for i := 0; i < 6; i++ {
			if ok, _ := b.AllowRetry(zero); !ok {
				t.Fatalf("retry %d refused", i)
			}
		}
		ok, next := b.AllowRetry(zero)
		if ok || !next.Equal(zero.Add(10*time.Second)) {
			t.Fatalf("7th retry: %v, next %v", ok, next)
		}
		if ok, _ := b.AllowRetry(next); !ok {
			t.Fatal("rate rule: refused at next")
		}
	})
	t.Run("ratio", func(t *testing.T) {
		b := mustNew(t, Config{RetryRatio: 0.5, MinRetriesPerSecond: 0.1, Window: 10 * time.Second, Buckets: 10})
		b.RecordAttempt(zero)
		b.RecordAttempt(zero)
		for i := 0; i < 2; i++ {
			if ok, _ := b.AllowRetry(zero); !ok {
				t.Fatalf("retry %d refused", i)
			}
		}
		ok, next := b.AllowRetry(zero)
		if ok || !next.Equal(zero.Add(11*time.Second)) {
			t.Fatalf("ratio rule: %v, next %v", ok, next)
		}
		if ok, _ := b.AllowRetry(next.Add(-time.Nanosecond)); ok {
			t.Fatal("ratio rule: allowed before next")
		}
		if ok, _ := b.AllowRetry(next); !ok {
			t.Fatal("ratio rule: refused at next")
		}
	})
}

// TestHugeWindow: a window of centuries (valid, if odd) still gives a next
// time after now; the expiry of its buckets overflowed an int64 of
// nanoseconds and came out in the past, so next was now itself.
func TestHugeWindow(t *testing.T) {
	window := 200 * 365 * 24 * time.Hour
	b := mustNew(t, Config{MinRetriesPerSecond: 1e-9, Window: window, Buckets: 1}) // reserve 6.3
	for i := 0; i < 6; i++ {
		if ok, _ := b.AllowRetry(t0); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	ok, next := b.AllowRetry(t0)
	if ok || !next.After(t0.AddDate(200, 0, 0)) {
		t.Fatalf("exhausted: %v, next %v, want after %v", ok, next, t0.AddDate(200, 0, 0))
	}
	if ok, _ := b.AllowRetry(next); !ok {
		t.Fatal("refused at next")
	}
}

// TestNextHoldsWhilePolling: asking (or reading Stats) while waiting for
// next does not move next. The rate rule added the tokens earned to its
// bucket at every call, and the rounding of the steps could leave it a
// hair short of a whole token at next (0.9999999999999999).
func TestNextHoldsWhilePolling(t *testing.T) {
	for rpm := 1; rpm <= 100; rpm++ {
		b := mustNew(t, Config{RetriesPerMinute: rpm})
		for i := 0; i < rpm; i++ {
			b.AllowRetry(t0)
		}
		ok, next := b.AllowRetry(t0)
		if ok {
			t.Fatalf("%d per minute: retry %d allowed", rpm, rpm+1)
		}
		wait := next.Sub(t0)
		for _, p := range []time.Duration{wait / 7, wait / 3, wait / 2, wait - time.Millisecond} {
			if ok, n := b.AllowRetry(t0.Add(p)); ok || !n.Equal(next) {
				t.Fatalf("%d per minute: at +%v: %v, next %v, want refused until %v", rpm, p, ok, n.Sub(t0), wait)
			}
			b.Stats(t0.Add(p + time.Microsecond))
		}
		if ok, _ := b.AllowRetry(next); !ok {
			t.Fatalf("%d per minute: refused at next (+%v) after polling, tokens %v", rpm, wait, b.Stats(next).RateTokens)
		}
	}
}

// TestNextIsEarliest replays random traffic with decimal ratios and, at
// every refusal, checks that no instant between now and next (bucket edges
// and random ones) would allow a retry, and that next does. The ratio rule
// summed the balance's changes one by one in floating point, which could
// differ in the last bit from the balance computed at that time, so next
// could skip an instant where a retry was allowed, or name one where it
// was not.
func TestNextIsEarliest(t *testing.T) {
	ratios := []float64{0.1, 0.3, 0.7, 1.0 / 3, 0.15, 2.3}
	floors := []float64{0, 0.1, 0.3, 0.7, 1.0 / 3}
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{
			RetriesPerMinute:    rng.IntN(2) * (1 + rng.IntN(500)),
			RetryRatio:          ratios[rng.IntN(len(ratios))],
			MinRetriesPerSecond: floors[rng.IntN(len(floors))],
			Window:              time.Duration(1+rng.IntN(20)) * time.Second,
			Buckets:             1 + rng.IntN(20),
		}
		width := cfg.Window / time.Duration(cfg.Buckets)
		b := mustNew(t, cfg)
		allowed := func(at time.Time) bool {
			s := b.Stats(at)
			return s.RatioBalance >= 1 && (cfg.RetriesPerMinute == 0 || s.RateTokens >= 1)
		}
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		for i := 0; i < 200; i++ {
			now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
			if rng.IntN(2) == 0 {
				b.RecordAttempt(now)
				continue
			}
			ok, next := b.AllowRetry(now)
			if ok || next.IsZero() {
				continue
			}
			probes := []time.Time{}
			for p := now.Truncate(width).Add(width); p.Before(next); p = p.Add(width) {
				probes = append(probes, p, p.Add(time.Duration(rng.Int64N(int64(width)))))
			}
			sort.Slice(probes, func(i, j int) bool { return probes[i].Before(probes[j]) })
			for _, p := range probes {
				if p.Before(next) && allowed(p) {
					t.Fatalf("seed %d %+v: refused at +%v until +%v, but allowed at +%v", seed, cfg, now.Sub(t0), next.Sub(t0), p.Sub(t0))
				}
			}
			if ok, _ := b.AllowRetry(next); !ok {
				t.Fatalf("seed %d %+v: refused at +%v until +%v, and refused then", seed, cfg, now.Sub(t0), next.Sub(t0))
			}
			now = next
		}
	}
}

// TestFloorBelowOnePerWindow: a floor of less than one retry per Window
// cannot make room by itself, so a refusal's next is the zero Time.
func TestFloorBelowOnePerWindow(t *testing.T) {
	b := mustNew(t, Config{RetryRatio: 0.5, MinRetriesPerSecond: 0.05, Window: 10 * time.Second}) // reserve 0.5
	if ok, next := b.AllowRetry(t0); ok || !next.IsZero() {
		t.Fatalf("no first attempts: %v, next %v", ok, next)
	}
	b.RecordAttempt(t0)
	if ok, _ := b.AllowRetry(t0); !ok {
		t.Fatal("reserve 0.5 and a deposit of 0.5: refused")
	}
}
