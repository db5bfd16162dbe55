package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// failingRecorder is a handler that fails every attempt and records the
// ordering priority each attempt was fetched at.
type failingRecorder struct {
	mu    sync.Mutex
	prios []int
}

func (f *failingRecorder) handle(_ context.Context, t *store.Task) error {
	f.mu.Lock()
	f.prios = append(f.prios, t.EffectivePrio)
	f.mu.Unlock()
	return retry.Transient(errPriorityTest503)
}

func (f *failingRecorder) seen() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.prios)
}

var errPriorityTest503 = &retry.HTTPError{StatusCode: 503}

// TestPrioritySinksPerFailedAttemptExceptTheLastChance: each failed attempt
// lowers the task's ordering priority by one, except the attempt before the
// dead-letter queue, which runs at the task's own priority again; the limit
// is the task's own max attempts when it has one, else its type's.
func TestPrioritySinksPerFailedAttemptExceptTheLastChance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, backend string) {
		st := openWorkerStoreOn(t, backend)
		e := startWorkerEngine(t, st, Config{NodeID: "prio-sink"})
		ctx := context.Background()
		pol := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond, Jitter: retry.JitterNone, MaxAttempts: 4}
		if _, err := e.PutType(ctx, TypeSpec{Type: "sink", Policy: pol}); err != nil {
			t.Fatal(err)
		}
		rec := &failingRecorder{}
		runWorker(t, e, WorkerConfig{Types: []string{"sink"}, Concurrency: 1, Handle: rec.handle})
		for _, c := range []struct {
			max  int
			want []int
		}{{0, []int{5, 4, 3, 5}}, {2, []int{5, 5}}, {3, []int{5, 4, 5}}} {
			rec.mu.Lock()
			rec.prios = nil
			rec.mu.Unlock()
			prio := 5
			res, err := e.Enqueue(ctx, EnqueueRequest{Type: "sink", Payload: json.RawMessage(`1`), Priority: &prio, MaxAttempts: c.max})
			if err != nil {
				t.Fatal(err)
			}
			tk := waitTask(t, e, res.Task.ID, "the task to die", func(tk store.Task) bool { return tk.State == store.StateDead })
			if got := rec.seen(); !slices.Equal(got, c.want) {
				t.Errorf("max attempts %d: attempts ran at priorities %v; want %v", c.max, got, c.want)
			}
			if tk.DeadReason != store.DeadMaxAttempts || tk.EffectivePrio != 5 {
				t.Errorf("max attempts %d: dead %q at effective priority %d; want max_attempts at 5", c.max, tk.DeadReason, tk.EffectivePrio)
			}
		}
	})
}
