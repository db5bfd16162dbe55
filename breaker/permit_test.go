package breaker

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustAcquire(t *testing.T, b *Breaker, now time.Time) Permit {
	t.Helper()
	p, err := b.Acquire(now)
	if err != nil {
		t.Fatalf("Acquire at +%v: %v", now.Sub(t0), err)
	}
	return p
}

// The late answer of a call let through while the breaker was closed is
// not a probe's answer: it frees no probe slot and does not count toward
// closing.
func TestLateAnswerOfCallLetThroughBeforeOpeningIsNotAProbe(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, HalfOpenProbes: 1,
		SuccessesToClose: 2, OnStateChange: rec.hook})
	slow := mustAcquire(t, b, t0)
	mustAcquire(t, b, t0).Failure(t0)
	half := t0.Add(10 * time.Second)
	probe := mustAcquire(t, b, half)
	if !probe.Probe() || slow.Probe() {
		t.Fatalf("Probe(): probe %v, slow call %v", probe.Probe(), slow.Probe())
	}
	slow.Success(half.Add(time.Second))
	if _, err := b.Acquire(half.Add(time.Second)); !errors.Is(err, ErrOpen) {
		t.Fatalf("a second probe was let through while the first is out: %v", err)
	}
	slow.Failure(half.Add(time.Second)) // reported again, as a failure: still not a probe
	probe.Success(half.Add(2 * time.Second))
	if s := b.State(half.Add(2 * time.Second)); s != HalfOpen {
		t.Fatalf("one probe success of two left the breaker %v", s)
	}
	mustAcquire(t, b, half.Add(2*time.Second)).Success(half.Add(3 * time.Second))
	want := "closed>open:consecutive_failures open>half_open:cool_down half_open>closed:probes_succeeded"
	if rec.String() != want {
		t.Fatalf("transitions %q\nwant %q", rec.String(), want)
	}
}

// A probe given up on (unanswered for a cool-down) belongs to an old round:
// its late answer neither frees a slot of the new round nor counts.
func TestAnswerOfGivenUpProbeIsIgnored(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, SuccessesToClose: 1})
	mustAcquire(t, b, t0).Failure(t0)
	old := mustAcquire(t, b, t0.Add(10*time.Second))
	round2 := t0.Add(20 * time.Second)
	mustAcquire(t, b, round2) // the old probe is given up on
	old.Success(round2)
	if s := b.State(round2); s != HalfOpen {
		t.Fatalf("a given-up probe's success moved the breaker to %v", s)
	}
	if _, err := b.Acquire(round2); err == nil {
		t.Fatal("a given-up probe's answer freed a slot of the new round")
	}
	old.Failure(round2)
	if s := b.State(round2); s != HalfOpen {
		t.Fatalf("a given-up probe's failure moved the breaker to %v", s)
	}
}

// A refused call gets an *OpenError wrapping ErrOpen that says when to ask
// again: the end of the cool-down, or of the probe round.
func TestAcquireRefusalSaysWhenToRetry(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 30 * time.Second})
	mustAcquire(t, b, t0).Failure(t0)
	now := t0.Add(5 * time.Second)
	_, err := b.Acquire(now)
	var oe *OpenError
	if !errors.Is(err, ErrOpen) || !errors.As(err, &oe) {
		t.Fatalf("refusal: %v", err)
	}
	if oe.Name != "db" || oe.State != Open || !oe.RetryAt.Equal(t0.Add(30*time.Second)) || oe.RetryAfter != 25*time.Second {
		t.Fatalf("%+v", oe)
	}
	if err.Error() != `circuit breaker "db" open: retry after 25s` {
		t.Fatalf("message %q", err.Error())
	}
	half := t0.Add(30 * time.Second)
	mustAcquire(t, b, half)
	_, err = b.Acquire(half.Add(time.Second))
	if !errors.As(err, &oe) || oe.State != HalfOpen || !oe.RetryAt.Equal(half.Add(30*time.Second)) || oe.RetryAfter != 29*time.Second {
		t.Fatalf("probe out: %v", err)
	}
}

// Release ends a call that says nothing about the downstream (cancelled,
// or refused for its own input): a probe's slot is given back and nothing
// is counted, in either state.
func TestReleaseCountsNothingAndFreesTheProbeSlot(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 2, CoolDown: 10 * time.Second, SuccessesToClose: 1})
	mustAcquire(t, b, t0).Failure(t0)
	mustAcquire(t, b, t0).Release()
	if s := b.Snapshot(t0); s.ConsecutiveFailures != 1 || s.Calls != 1 {
		t.Fatalf("Release counted: %+v", s)
	}
	mustAcquire(t, b, t0).Failure(t0) // the run of failures goes on
	half := t0.Add(10 * time.Second)
	mustAcquire(t, b, half).Release()
	if s := b.State(half); s != HalfOpen {
		t.Fatalf("a released probe moved the breaker to %v", s)
	}
	p := mustAcquire(t, b, half) // the slot was given back
	p.Release()
	p.Release() // a second release of the same permit frees nothing more
	q := mustAcquire(t, b, half)
	if _, err := b.Acquire(half); err == nil {
		t.Fatal("two probes out with HalfOpenProbes 1")
	}
	q.Success(half)
	if s := b.State(half); s != Closed {
		t.Fatalf("probe success left the breaker %v", s)
	}
	var zero Permit
	zero.Success(half)
	zero.Failure(half)
	zero.Release()
}

// Hammered by many goroutines, some of whose calls are slow enough to
// answer in a later state, a breaker never has more probes of one round
// out than HalfOpenProbes.
func TestConcurrentProbesNeverExceedHalfOpenProbes(t *testing.T) {
	const probes = 2
	b := mustNew(t, Config{ConsecutiveFailures: 3, CoolDown: 20 * time.Millisecond, HalfOpenProbes: probes, SuccessesToClose: 4})
	var (
		clock  atomic.Int64 // fake time, in ms after t0
		mu     sync.Mutex
		out    = map[uint64]int{} // probes out per generation
		worst  int
		probed atomic.Int64
		wg     sync.WaitGroup
	)
	now := func() time.Time { return t0.Add(time.Duration(clock.Load()) * time.Millisecond) }
	answer := func(p Permit, how int) {
		if p.Probe() {
			mu.Lock()
			out[p.gen]--
			mu.Unlock()
		}
		switch {
		case how < 3:
			p.Failure(now())
		case how == 3:
			p.Release()
		default:
			p.Success(now())
		}
	}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var pending []Permit // calls answered a little later
			var slow []Permit    // calls answered much later, often in another state
			for i := 0; i < 3000; i++ {
				if i%10 == 0 {
					clock.Add(1)
				}
				if len(pending) > 0 && (i%3 == 0 || len(pending) > 4) {
					answer(pending[0], rng.IntN(10))
					pending = pending[1:]
				}
				if len(slow) > 0 && (i%20 == 0 || len(slow) > 10) {
					answer(slow[0], 9) // a success
					slow = slow[1:]
				}
				p, err := b.Acquire(now())
				if err != nil {
					continue
				}
				if p.Probe() {
					probed.Add(1)
					mu.Lock()
					out[p.gen]++
					worst = max(worst, out[p.gen])
					mu.Unlock()
				}
				switch {
				case !p.Probe() && rng.IntN(4) == 0:
					slow = append(slow, p)
					continue
				case rng.IntN(2) == 0:
					pending = append(pending, p)
					continue
				}
				answer(p, rng.IntN(10))
			}
			for _, p := range append(pending, slow...) {
				answer(p, rng.IntN(10))
			}
		}()
	}
	wg.Wait()
	if probed.Load() == 0 {
		t.Fatal("no probes: the test exercised nothing")
	}
	if worst > probes {
		t.Fatalf("%d probes of one round out at once, want at most %d", worst, probes)
	}
}

// A round of probes is given up on only once its newest probe has gone a
// whole cool-down unanswered: a probe let through late in the round (after
// an earlier one succeeded) is waited for as long as the first, so its
// failure reopens the breaker and no second probe joins it meanwhile.
func TestProbeLetThroughLateInRoundIsWaitedForAWholeCoolDown(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, OnStateChange: rec.hook})
	mustAcquire(t, b, t0).Failure(t0)
	half := t0.Add(10 * time.Second)
	mustAcquire(t, b, half).Success(half.Add(9 * time.Second))
	late := mustAcquire(t, b, half.Add(9*time.Second)) // the round's second probe
	_, err := b.Acquire(half.Add(10 * time.Second))
	var oe *OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("a second probe let through while the late one was out 1s of its 10s: %v", err)
	}
	if want := half.Add(19 * time.Second); !oe.RetryAt.Equal(want) {
		t.Fatalf("RetryAt +%v, want +%v (a cool-down after the late probe)", oe.RetryAt.Sub(t0), want.Sub(t0))
	}
	late.Failure(half.Add(11 * time.Second))
	if s := b.State(half.Add(11 * time.Second)); s != Open {
		t.Fatalf("the late probe's failure left the breaker %v; transitions %s", s, rec.String())
	}
	// Without permits the same holds.
	a := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second})
	a.Failure(t0)
	if ok, _ := a.Allow(half); !ok {
		t.Fatal("first probe refused")
	}
	a.Success(half.Add(9 * time.Second))
	if ok, _ := a.Allow(half.Add(9 * time.Second)); !ok {
		t.Fatal("second probe refused")
	}
	if ok, at := a.Allow(half.Add(10 * time.Second)); ok || !at.Equal(half.Add(19*time.Second)) {
		t.Fatalf("Allow while the late probe is out: %v, +%v", ok, at.Sub(t0))
	}
}

// A probe permit answered twice counts once: a second Release or Success
// of the same permit frees no other probe's slot (which let more than
// HalfOpenProbes probes out) and a second Success does not count toward
// closing (which closed the breaker on one probe's word).
func TestProbeAnsweredTwiceCountsOnce(t *testing.T) {
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, HalfOpenProbes: 2, SuccessesToClose: 2})
	mustAcquire(t, b, t0).Failure(t0)
	half := t0.Add(10 * time.Second)
	p, q := mustAcquire(t, b, half), mustAcquire(t, b, half)
	p.Release()
	p.Release()
	mustAcquire(t, b, half)
	if _, err := b.Acquire(half); err == nil {
		t.Fatal("a permit released twice freed q's slot: 3 probes out with HalfOpenProbes 2")
	}
	q.Success(half)
	q.Success(half)
	if s := b.State(half); s != HalfOpen {
		t.Fatalf("one probe's success reported twice left the breaker %v", s)
	}
}
