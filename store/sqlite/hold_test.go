package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestOutcomeHeldFromInsertGroup: an outcome batch queued beside an insert
// is left out of the insert's commit and committed right after it, on its
// own, since nothing else follows: two commits where there used to be one,
// and the outcome is applied.
func TestOutcomeHeldFromInsertGroup(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "h1", Type: "t"}}}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(leased) != 1 {
		t.Fatalf("fetch: %v %v", leased, err)
	}
	task := leased[0]

	// A write that keeps the writer busy while the two queue up.
	release, blocked := blockWriter(s)
	inserted := make(chan error, 1)
	go func() {
		_, err := s.InsertTasks(context.Background(), store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: "h2", Type: "t"}}})
		inserted <- err
	}()
	waitQueued(t, s, 1)
	recorded := make(chan error, 1)
	go func() {
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
			TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
		if err == nil {
			err = errs[0]
		}
		recorded <- err
	}()
	waitQueued(t, s, 2)
	before := s.GroupStats()
	close(release)
	timeout := time.After(30 * time.Second)
	for _, c := range []struct {
		what string
		ch   chan error
	}{{"blocker", blocked}, {"insert", inserted}, {"held outcome", recorded}} {
		select {
		case err := <-c.ch:
			if err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
		case <-timeout:
			t.Fatalf("the %s never committed", c.what)
		}
	}
	// The blocker's group is counted when its transaction ends, after the
	// snapshot; the insert and the outcome went out in two more.
	if n := s.GroupStats().Groups - before.Groups; n != 3 {
		t.Fatalf("%d groups from the blocker, the insert and the outcome; want 3 (the outcome held out of the insert's group)", n)
	}
	if got, err := s.GetTask(ctx, task.ID); err != nil || got.State != store.StateSucceeded {
		t.Fatalf("task after the outcome: %v %v", got.State, err)
	}
}

// waitQueued polls until n writes wait in the writer's queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); len(s.writeCh) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes never queued", n)
		}
	}
}

// TestCloseAnswersHeldOutcomes: producers enqueue one task at a time
// while a worker fetches and records outcomes (which the writer holds back
// from the producers' commits), and the store closes at varying points:
// every call returns, committed or with ErrClosed.
func TestCloseAnswersHeldOutcomes(t *testing.T) {
	for round := range 10 {
		s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "retryq.db")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		stop := func(err error) bool {
			if errors.Is(err, store.ErrClosed) {
				return true
			}
			if err != nil {
				t.Errorf("round %d: %v", round, err)
				return true
			}
			return false
		}
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{{ID: fmt.Sprintf("r%d-g%d-%d", round, g, i), Type: "t"}}})
					if stop(err) {
						return
					}
				}
			})
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: 8, WorkerID: "w", LeaseDuration: time.Minute, Now: time.Now()})
				if stop(err) {
					return
				}
				outs := make([]store.Outcome, len(ts))
				for i, task := range ts {
					outs[i] = store.Outcome{TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
				}
				if _, err := s.RecordOutcomes(ctx, store.OutcomeParams{Now: time.Now(), Outcomes: outs}); stop(err) {
					return
				}
			}
		})
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if s.GroupStats().Groups > int64(5*round+5) { // vary how far they got
				break
			}
		}
		s.Close()
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("round %d: callers still waiting 30 s after Close", round)
		}
		cancel()
	}
}
