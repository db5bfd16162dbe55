package breaker

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type recorder struct {
	mu   sync.Mutex
	list []string
}

func (r *recorder) hook(t Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, t.From.String()+">"+t.To.String()+":"+t.Reason)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.list, " ")
}

func mustNew(t testing.TB, cfg Config) *Breaker {
	t.Helper()
	b, err := New("db", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConsecutiveFailuresOpenAndProbesClose(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 3, CoolDown: 10 * time.Second, OnStateChange: rec.hook})
	now := t0
	b.Failure(now)
	b.Failure(now)
	b.Success(now) // resets the run
	b.Failure(now)
	b.Failure(now)
	if b.State(now) != Closed {
		t.Fatal("opened before 3 consecutive failures")
	}
	b.Failure(now)
	if ok, at := b.Allow(now.Add(time.Second)); ok || !at.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("open breaker: Allow = %v, %v", ok, at)
	}
	now = t0.Add(10 * time.Second)
	if ok, _ := b.Allow(now); !ok {
		t.Fatal("first probe refused after cool-down")
	}
	if ok, at := b.Allow(now); ok || !at.Equal(now.Add(10*time.Second)) {
		t.Fatalf("second concurrent probe: %v, %v", ok, at)
	}
	b.Success(now)
	if b.State(now) != HalfOpen {
		t.Fatal("closed after one probe success; want two")
	}
	if ok, _ := b.Allow(now); !ok {
		t.Fatal("next probe refused")
	}
	b.Success(now)
	if b.State(now) != Closed {
		t.Fatal("not closed after two probe successes")
	}
	want := "closed>open:consecutive_failures open>half_open:cool_down half_open>closed:probes_succeeded"
	if rec.String() != want {
		t.Fatalf("transitions %q\nwant %q", rec.String(), want)
	}
	if s := b.Snapshot(now); s.ConsecutiveFailures != 0 || s.Calls != 0 {
		t.Fatalf("closing should reset counts: %+v", s)
	}
}

func TestProbeFailureReopens(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: time.Minute, OnStateChange: rec.hook})
	b.Failure(t0)
	probeAt := t0.Add(time.Minute)
	if ok, _ := b.Allow(probeAt); !ok {
		t.Fatal("probe refused")
	}
	b.Failure(probeAt.Add(time.Second))
	ok, at := b.Allow(probeAt.Add(2 * time.Second))
	if ok || !at.Equal(probeAt.Add(time.Second+time.Minute)) {
		t.Fatalf("reopened breaker: %v %v", ok, at)
	}
	if !strings.HasSuffix(rec.String(), "half_open>open:probe_failed") {
		t.Fatal(rec.String())
	}
	b.Failure(probeAt.Add(3 * time.Second)) // a late result while open is ignored
	if s := b.Snapshot(probeAt.Add(3 * time.Second)); s.State != Open || !s.OpenedAt.Equal(probeAt.Add(time.Second)) {
		t.Fatalf("%+v", s)
	}
}

func TestUnansweredProbesAreGivenUp(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, HalfOpenProbes: 2})
	b.Failure(t0)
	at := t0.Add(10 * time.Second)
	for i := 0; i < 2; i++ {
		if ok, _ := b.Allow(at); !ok {
			t.Fatalf("probe %d refused", i)
		}
	}
	if ok, _ := b.Allow(at.Add(9 * time.Second)); ok {
		t.Fatal("third probe allowed")
	}
	if ok, _ := b.Allow(at.Add(10 * time.Second)); !ok {
		t.Fatal("new probe round not started after the cool-down")
	}
}

func TestFailureRateOverSlidingWindow(t *testing.T) {
	var rec recorder
	cfg := Config{ConsecutiveFailures: -1, FailureRate: 0.5, RateMinFailures: 10,
		Window: time.Minute, Buckets: 6, OnStateChange: rec.hook}
	b := mustNew(t, cfg)
	now := t0
	for i := 0; i < 9; i++ { // 9 failures, 9 successes: too few failures
		b.Success(now)
		b.Failure(now)
		now = now.Add(time.Second)
	}
	if b.State(now) != Closed {
		t.Fatal("opened below RateMinFailures")
	}
	b.Failure(now) // 10 of 19
	if b.State(now) != Open || rec.String() != "closed>open:failure_rate" {
		t.Fatalf("want open by failure rate, got %v %q", b.State(now), rec.String())
	}

	// Low rate: many failures but mostly successes.
	b = mustNew(t, cfg)
	for i := 0; i < 40; i++ {
		b.Success(t0)
		b.Success(t0)
		b.Failure(t0) // 40 failures of 120 = 33%
	}
	if b.State(t0) != Closed {
		t.Fatal("opened at 33% failures")
	}

	// Old failures slide out of the window.
	b = mustNew(t, cfg)
	for i := 0; i < 9; i++ {
		b.Failure(t0)
	}
	later := t0.Add(61 * time.Second)
	b.Failure(later)
	if s := b.Snapshot(later); s.State != Closed || s.Failures != 1 || s.Calls != 1 {
		t.Fatalf("old failures still counted: %+v", s)
	}
	if b.win.Len() != 6 {
		t.Fatal("window grew")
	}
}

func TestTimeGoingBackwardsIsTolerated(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: -1, RateMinFailures: 2, Window: time.Minute, Buckets: 6})
	b.Failure(t0.Add(time.Minute))
	b.Failure(t0) // earlier than the last call: counted in the latest bucket
	if b.State(t0) != Open {
		t.Fatal("failure with an earlier timestamp was lost")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{FailureRate: 1.5}, "FailureRate"},
		{Config{ConsecutiveFailures: -1, FailureRate: -1}, "ConsecutiveFailures"},
		{Config{RateMinFailures: -1}, "RateMinFailures"},
		{Config{Window: -time.Second}, "Window"},
		{Config{Buckets: 5000}, "Buckets"},
		{Config{Window: 3, Buckets: 4}, "Window"},
		{Config{CoolDown: -1}, "CoolDown"},
		{Config{HalfOpenProbes: -1}, "HalfOpenProbes"},
		{Config{HalfOpenProbes: MaxHalfOpenProbes + 1}, "HalfOpenProbes"},
		{Config{HalfOpenProbes: MaxHalfOpenProbes}, ""},
		{Config{SuccessesToClose: -1}, "SuccessesToClose"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "breaker config: "+tt.want+":") || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want field %s", tt.cfg, err, tt.want)
		}
		if _, err := New("x", tt.cfg); err == nil {
			t.Errorf("New accepted %+v", tt.cfg)
		}
	}
}

func TestSet(t *testing.T) {
	var mu sync.Mutex
	var names []string
	s, err := NewSet(Config{ConsecutiveFailures: 1, OnStateChange: func(tr Transition) {
		mu.Lock()
		names = append(names, tr.Name)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := s.Get("payments"), s.Get("payments"); a != b {
		t.Fatal("Get returned different breakers")
	}
	s.Get("search").Failure(t0)
	if s.Get("payments").State(t0) != Closed || s.Get("search").State(t0) != Open {
		t.Fatal("breakers are not independent")
	}
	if got := strings.Join(s.Names(), ","); got != "payments,search" || len(names) != 1 || names[0] != "search" {
		t.Fatalf("names %q, hook saw %v", got, names)
	}
	if _, err := NewSet(Config{Buckets: -1}); err == nil {
		t.Fatal("NewSet accepted a bad config")
	}
}

// TestConcurrentUse: four goroutines use one breaker at once (for -race);
// its state changes reach the hook one at a time and in order, each
// starting from the state the one before it ended in.
//
// A change is certain under any schedule, not only a lucky one, through
// the rate rule, set here rather than left to the defaults. While the
// breaker is closed every call is let through and counted (all in one
// window), and each goroutine fails two calls in three (with at most one
// success more than a third of its calls so far): by about 80 counted
// calls, of the 8000, at least 50 have failed and at least half, and the
// rate rule opens the breaker. The rule of 3 failures in a row alone would
// not make it certain: a schedule can keep every run of failures to 2.
func TestConcurrentUse(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 3, FailureRate: 0.5, RateMinFailures: 50, Window: time.Minute,
		CoolDown: time.Millisecond, OnStateChange: rec.hook})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				if ok, _ := b.Allow(now); ok {
					if (i+g)%3 == 0 {
						b.Success(now)
					} else {
						b.Failure(now)
					}
				}
				b.Snapshot(now)
			}
		}()
	}
	wg.Wait()
	if rec.String() == "" {
		t.Fatal("no transitions")
	}
	from := Closed.String()
	for i, tr := range rec.list {
		if !strings.HasPrefix(tr, from+">") {
			t.Fatalf("transition %d is %s, want one from %s (the state the one before ended in): %s", i, tr, from, rec.String())
		}
		from, _, _ = strings.Cut(strings.TrimPrefix(tr, from+">"), ":")
	}
}

func BenchmarkBreakerAllowSuccess(b *testing.B) {
	br := mustNew(b, Config{})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if ok, _ := br.Allow(now); ok {
			br.Success(now)
		}
	}
}

func BenchmarkBreakerFailureRate(b *testing.B) {
	br := mustNew(b, Config{ConsecutiveFailures: -1, RateMinFailures: 1 << 30})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		br.Failure(now)
	}
}

// A result that arrives while the breaker is half-open but no probe is out
// comes from a call let through earlier (before the breaker opened, or a
// probe given up on): it is not a probe's answer and must neither close nor
// reopen the breaker.
func TestLateResultWithNoProbeOutIsIgnored(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, SuccessesToClose: 1})
	b.Allow(t0) // a slow call, let through while closed
	b.Failure(t0)
	half := t0.Add(10 * time.Second)
	if b.State(half) != HalfOpen {
		t.Fatal("not half-open after the cool-down")
	}
	b.Success(half.Add(time.Second)) // the slow call's late answer
	if s := b.State(half.Add(time.Second)); s != HalfOpen {
		t.Fatalf("a late success with no probe out moved the breaker to %v", s)
	}
	b.Failure(half.Add(2 * time.Second)) // another late answer
	if s := b.State(half.Add(2 * time.Second)); s != HalfOpen {
		t.Fatalf("a late failure with no probe out moved the breaker to %v", s)
	}
	if ok, _ := b.Allow(half.Add(2 * time.Second)); !ok {
		t.Fatal("the probe was refused")
	}
	b.Success(half.Add(3 * time.Second))
	if s := b.State(half.Add(3 * time.Second)); s != Closed {
		t.Fatalf("the probe's success left the breaker %v", s)
	}
}

// TestFailureRateWindowSlidesAtAnyDate: old failures leave the rate rule's
// window whatever the clock says. Before 1970 (a fake clock starting at the
// zero Time, say) every call landed in one bucket that never slid, so
// failures an hour apart added up and opened the breaker.
func TestFailureRateWindowSlidesAtAnyDate(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), t0} {
		b := mustNew(t, Config{ConsecutiveFailures: -1, RateMinFailures: 3, Window: time.Minute, Buckets: 6})
		for i := 0; i < 3; i++ {
			b.Failure(start.Add(time.Duration(i) * time.Hour))
			b.Success(start.Add(time.Duration(i) * time.Hour))
		}
		if s := b.Snapshot(start.Add(2 * time.Hour)); s.State != Closed || s.Failures != 1 || s.Calls != 2 {
			t.Errorf("from %v: %+v, want closed with 1 failure of 2 calls", start, s)
		}
	}
}
