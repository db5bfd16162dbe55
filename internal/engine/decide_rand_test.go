package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// overlapRand is a Rand that notices being called by two goroutines at
// once: each call waits (up to a deadline) for another one to arrive
// while it is inside, as a concurrent caller would.
type overlapRand struct {
	inside  atomic.Int32
	overlap atomic.Bool
	arrived chan struct{}
}

func (r *overlapRand) Float64() float64 {
	if r.inside.Add(1) > 1 {
		r.overlap.Store(true)
		select {
		case r.arrived <- struct{}{}:
		default:
		}
	} else {
		select {
		case <-r.arrived:
		case <-time.After(200 * time.Millisecond):
		}
	}
	r.inside.Add(-1)
	return 0.5
}

// TestDecideSerializesTheInjectedRand: Decide runs at once on every
// worker, pull request and the reaper, and draws its jitter from the
// engine's Config.Rand; an injected source (a seeded *rand.Rand, for
// deterministic delays) is not safe for concurrent use, so the engine
// never calls it from two goroutines at once. Before, concurrent
// decisions raced on it.
func TestDecideSerializesTheInjectedRand(t *testing.T) {
	r := &overlapRand{arrived: make(chan struct{}, 1)}
	e, err := New(Config{Store: openWorkerStoreOn(t, "sqlite"), Rand: r})
	if err != nil {
		t.Fatal(err)
	}
	spec := e.defaultSpec("t")
	spec.Policy.Jitter = retry.JitterFull
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var wg sync.WaitGroup
	for i := range 2 {
		task := &store.Task{ID: string(rune('a' + i)), Type: "t", Attempt: 1, LeaseID: "l"}
		wg.Go(func() {
			if out := e.Decide(task, &spec, Failure{Code: "503", Message: "m", Class: retry.ClassTransient}, now); out.State != store.StateRetryWaiting {
				t.Errorf("state %s, want retry_waiting", out.State)
			}
		})
	}
	wg.Wait()
	if r.overlap.Load() {
		t.Error("Decide called the injected Rand from two goroutines at once")
	}
}
