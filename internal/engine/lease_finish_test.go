package engine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// slowOutcomeCommit is a store whose commit of a finished attempt's outcome
// is slow: it waits until a heartbeat has extended the attempt's lease while
// the commit was under way, or gives up waiting after most of a lease (the
// commit's own bound is one lease). It records whether that extension came.
type slowOutcomeCommit struct {
	store.Store
	lease time.Duration

	mu         sync.Mutex
	committing map[string]bool // task id → its outcome's commit waits
	extended   chan string     // a committing task's lease was extended
	waited     map[string]bool // task id → a heartbeat came during its commit
}

func newSlowOutcomeCommit(st store.Store, lease time.Duration) *slowOutcomeCommit {
	return &slowOutcomeCommit{Store: st, lease: lease, committing: map[string]bool{},
		extended: make(chan string, 64), waited: map[string]bool{}}
}

func (s *slowOutcomeCommit) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	errs, err := s.Store.ExtendLeases(ctx, p)
	if err != nil {
		return errs, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range p.Leases {
		if errs[i] == nil && s.committing[l.TaskID] {
			select {
			case s.extended <- l.TaskID:
			default:
			}
		}
	}
	return errs, err
}

func (s *slowOutcomeCommit) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	var slow string
	s.mu.Lock()
	for _, o := range p.Outcomes {
		if o.State != store.StatePending && !s.waited[o.TaskID] && !s.committing[o.TaskID] {
			slow = o.TaskID
			s.committing[slow] = true
			break
		}
	}
	s.mu.Unlock()
	if slow != "" {
		got := false
		deadline := time.After(s.lease * 8 / 10)
	wait:
		for {
			select {
			case id := <-s.extended:
				if id == slow {
					got = true
					break wait
				}
			case <-deadline:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		s.mu.Lock()
		delete(s.committing, slow)
		s.waited[slow] = got
		s.mu.Unlock()
	}
	return s.Store.RecordOutcomes(ctx, p)
}

func (s *slowOutcomeCommit) extendedDuringCommit(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waited[id]
}

// TestLeaseHeartbeatedUntilOutcomeCommits: a finished attempt's lease is
// extended by the heartbeats until its outcome has committed, for
// in-process handlers and push deliveries alike. Before, the lease left the
// heartbeat table when the handler returned: an outcome commit slower than
// what was left of the lease (about two thirds of it at worst) let the
// reaper count the finished attempt as lease_expired and run the task again.
func TestLeaseHeartbeatedUntilOutcomeCommits(t *testing.T) {
	backendtest.Run(t, testLeaseHeartbeatedUntilOutcomeCommits)
}

func testLeaseHeartbeatedUntilOutcomeCommits(t *testing.T, backend string) {
	// Heartbeats every second; the commit waits up to 2.4 s for one. A
	// 600 ms lease left a loaded machine's heartbeat (200 ms apart, the
	// wait 480 ms) too little room.
	const lease = 3 * time.Second
	st := newSlowOutcomeCommit(openWorkerStoreOn(t, backend), lease)
	e := startWorkerEngine(t, st, Config{LeaseDuration: lease})
	runWorker(t, e, WorkerConfig{Types: []string{"inproc"}, Concurrency: 1,
		Handle: func(context.Context, *store.Task) error { return nil }})
	srv := target(t, func(http.ResponseWriter, *http.Request) {})
	p := &pushEnv{t: t, e: e}
	p.putType("pushed", fastPolicy(3), Target{URL: srv.URL})

	for _, typ := range []string{"inproc", "pushed"} {
		id := mustEnqueue(t, e, typ, `{}`)
		tk := waitTask(t, e, id, "succeeded", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
		if !st.extendedDuringCommit(id) {
			t.Errorf("%s: no heartbeat extended the lease while the outcome was committing (for %v)", typ, lease*8/10)
		}
		if tk.Attempt != 1 {
			t.Errorf("%s: task succeeded at attempt %d, want 1", typ, tk.Attempt)
		}
	}
}
