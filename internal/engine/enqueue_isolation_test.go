package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// poisonStore refuses, as invalid, any insert holding a task of type
// "poison", the way a store refuses a whole batch for one bad task. Its
// first insert waits until the test opens the gate, so that the enqueues
// made meanwhile queue up and share the next insert. It does not group
// commits itself, so the engine merges concurrent enqueues.
type poisonStore struct {
	store.Store
	gate        chan struct{}
	first       atomic.Bool
	mixedGroups atomic.Int64 // inserts of several tasks that held poison
}

func (s *poisonStore) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	if s.first.CompareAndSwap(false, true) {
		<-s.gate
	}
	for _, nt := range p.Tasks {
		if nt.Type == "poison" {
			if len(p.Tasks) > 1 {
				s.mixedGroups.Add(1)
			}
			return nil, fmt.Errorf("insert tasks: %w: poisoned", store.ErrInvalid)
		}
	}
	return s.Store.InsertTasks(ctx, p)
}

// TestEnqueueBadTaskDoesNotFailOthers: enqueues of different callers that
// share one insert are not failed by one caller's invalid task: the group
// is inserted again task by task, and only the bad one fails.
func TestEnqueueBadTaskDoesNotFailOthers(t *testing.T) {
	backendtest.Run(t, testEnqueueBadTaskDoesNotFailOthers)
}

func testEnqueueBadTaskDoesNotFailOthers(t *testing.T, backend string) {
	st := &poisonStore{Store: openWorkerStoreOn(t, backend), gate: make(chan struct{})}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	first := make(chan error, 1)
	go func() { // held at the gate: the callers below queue behind it
		_, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "good", Payload: json.RawMessage(`0`)})
		first <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !st.first.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first insert never started")
		}
	}
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		typ := "good"
		if i%5 == 0 {
			typ = "poison"
		}
		wg.Go(func() {
			_, errs[i] = e.Enqueue(context.Background(), EnqueueRequest{Type: typ, Payload: json.RawMessage(`1`)})
		})
	}
	for deadline := time.Now().Add(10 * time.Second); len(e.inserts.ch) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d enqueues queued", len(e.inserts.ch), n)
		}
	}
	close(st.gate)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("first enqueue: %v", err)
	}
	if st.mixedGroups.Load() == 0 {
		t.Fatal("no insert held good and bad tasks together: the test did not exercise the shared insert")
	}
	for i, err := range errs {
		switch {
		case i%5 == 0 && !errors.Is(err, store.ErrInvalid):
			t.Errorf("enqueue %d (poison) = %v, want ErrInvalid", i, err)
		case i%5 != 0 && err != nil:
			t.Errorf("enqueue %d (good) = %v, want success", i, err)
		}
	}
}
