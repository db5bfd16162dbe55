package breaker

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Transitions are reported in the order they happened, one hook call at a
// time: a change made while the hook of an earlier one still runs (in
// another goroutine) is reported after it, not concurrently and first. Two
// changes at the same time could not be ordered by Transition.At.
func TestHooksAreCalledInOrder(t *testing.T) {
	var rec recorder
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, OnStateChange: func(tr Transition) {
		if first { // only the first call blocks; calls are serialized by the breaker
			first = false
			close(entered)
			<-release
		}
		rec.hook(tr)
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Failure(t0) // closed -> open; its hook blocks
	}()
	<-entered
	half := t0.Add(10 * time.Second)
	if s := b.State(half); s != HalfOpen { // open -> half_open while the first hook runs
		t.Fatalf("state %v, want half_open", s)
	}
	close(release)
	<-done
	want := "closed>open:consecutive_failures open>half_open:cool_down"
	if rec.String() != want {
		t.Fatalf("transitions reported as %q\nwant %q", rec.String(), want)
	}
}

// A hook may call back into its breaker, and even change its state: it
// does not deadlock, and the change it causes is reported after its own.
func TestHookMayCallBackIntoTheBreaker(t *testing.T) {
	var rec recorder
	var b *Breaker
	half := t0.Add(10 * time.Second)
	b = mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, OnStateChange: func(tr Transition) {
		if tr.To == Open {
			if _, err := b.Acquire(half); err != nil { // open -> half_open, and a probe
				t.Errorf("probe refused: %v", err)
			}
			b.Snapshot(half)
		}
		rec.hook(tr)
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Failure(t0)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a hook calling back into its breaker deadlocked")
	}
	want := "closed>open:consecutive_failures open>half_open:cool_down"
	if rec.String() != want {
		t.Fatalf("transitions reported as %q\nwant %q", rec.String(), want)
	}
}

// A hook that panics does not stop later changes from being reported.
func TestHookPanicDoesNotStopLaterReports(t *testing.T) {
	var rec recorder
	b := mustNew(t, Config{ConsecutiveFailures: 1, CoolDown: 10 * time.Second, OnStateChange: func(tr Transition) {
		rec.hook(tr)
		if tr.To == Open {
			panic("hook")
		}
	}})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the hook's panic was swallowed")
			}
		}()
		b.Failure(t0)
	}()
	b.State(t0.Add(10 * time.Second))
	want := "closed>open:consecutive_failures open>half_open:cool_down"
	if rec.String() != want {
		t.Fatalf("transitions reported as %q\nwant %q", rec.String(), want)
	}
}

// Under many goroutines the reported changes form one chain: each starts
// in the state the previous one ended in, starting closed.
func TestConcurrentHooksFormAChain(t *testing.T) {
	var (
		mu    sync.Mutex
		last  = Closed
		n     int
		wrong string
	)
	b := mustNew(t, Config{ConsecutiveFailures: 2, CoolDown: time.Millisecond, HalfOpenProbes: 2, SuccessesToClose: 1,
		OnStateChange: func(tr Transition) {
			mu.Lock()
			defer mu.Unlock()
			if tr.From != last && wrong == "" {
				wrong = fmt.Sprintf("change %d: %v>%v after a change to %v", n, tr.From, tr.To, last)
			}
			last = tr.To
			n++
		}})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				if p, err := b.Acquire(now); err == nil {
					if (i+g)%3 == 0 {
						p.Success(now)
					} else {
						p.Failure(now)
					}
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n == 0 {
		t.Fatal("no transitions")
	}
	if wrong != "" {
		t.Fatal(wrong)
	}
}
