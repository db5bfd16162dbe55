package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// When the scheduler loops start (on election), their first pass (promote
// due tasks, reap expired leases) must run at once. A poke queued before
// the loops started (here: a task enqueued with a one-hour delay) must not
// push that first pass back to the poked time: runScheduler treats next ==
// zero as "no timer set" although the timer is armed for 0, and resets it to
// the poked time whenever the select takes the poke before the timer (in
// practice on every start here; the rounds only make it certain).
func TestSchedulerFirstPassNotDelayedByPoke(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 8; round++ {
		st := openWorkerStoreOn(t, "sqlite")
		now := time.Now()
		// A task that becomes due 50 ms from now, inserted without a poke
		// (as by another process, or before this node started).
		res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{
			ID: NewID(now), Type: "sched.t", Payload: []byte("null"), RunAt: now.Add(50 * time.Millisecond)}}})
		if err != nil {
			t.Fatal(err)
		}
		id := res[0].Task.ID
		e, err := New(Config{Store: st, NodeID: "sched-test", PollInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// A delayed task enqueued on this node before its scheduler runs.
		if _, err := e.EnqueueMany(ctx, []EnqueueRequest{{Type: "sched.t", Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		var got store.Task
		for time.Now().Before(deadline) {
			got, err = st.GetTask(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == store.StatePending {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = e.Close()
		if got.State != store.StatePending {
			t.Fatalf("round %d: task due 50ms after start is still %s after 10s (poll interval 100ms): the scheduler's first pass was pushed back to the one-hour poke", round, got.State)
		}
	}
}

// TestReapedOutcomesAreCounted: the reaper's decisions are counted like a
// worker's: a reaped task retried counts in Retried, one dead-lettered in
// Dead (and both in Reaped). The reaper records its outcomes itself, and
// they used to show only in Reaped, so Client.Counters under-reported
// retries and dead letters whenever workers crashed.
func TestReapedOutcomesAreCounted(t *testing.T) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, "sqlite")
	now := time.Now()
	var nts []store.NewTask
	for i, max := range []int{1, 3} { // dead at once / retried
		nts = append(nts, store.NewTask{ID: NewID(now.Add(time.Duration(i))), Type: "reap.t", Payload: []byte("null"), RunAt: now, MaxAttempts: max})
	}
	res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: nts})
	if err != nil {
		t.Fatal(err)
	}
	// A worker of another process leases both, then dies.
	leased, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"reap.t"}, Limit: 2, WorkerID: "gone", LeaseDuration: 20 * time.Millisecond, Now: now})
	if err != nil || len(leased) != 2 {
		t.Fatalf("fetch: %d tasks, %v", len(leased), err)
	}
	e, err := New(Config{Store: st, NodeID: "reap-test", PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	deadline := time.Now().Add(10 * time.Second)
	for e.Counters().Reaped < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %d of 2 expired leases in 10 s", e.Counters().Reaped)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dead, err := st.GetTask(ctx, res[0].Task.ID)
	if err != nil || dead.State != store.StateDead {
		t.Fatalf("task with one attempt: %s, %v; want dead", dead.State, err)
	}
	c := e.Counters()
	if c.Dead != 1 || c.Retried != 1 {
		t.Fatalf("counters after reaping one task to the DLQ and one to a retry: Dead %d, Retried %d; want 1 and 1", c.Dead, c.Retried)
	}
}

// typeOutageStore fails GetType with ErrUnavailable while down is set: a
// database that is briefly away for the type configuration's read.
type typeOutageStore struct {
	store.Store
	down atomic.Bool
}

func (s *typeOutageStore) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	if s.down.Load() {
		return store.TypeConfig{}, fmt.Errorf("get type: %w", store.ErrUnavailable)
	}
	return s.Store.GetType(ctx, typ)
}

// TestReaperWaitsForTheTypeConfiguration: a task whose lease expired is
// reaped under its type's stored policy (10 attempts), never under the
// engine's default policy (1 attempt here) because the type's
// configuration could not be read at that moment. While the read fails
// the reaper leaves the task for a later pass; before, it decided under
// the defaults and dead-lettered the task after its first attempt.
func TestReaperWaitsForTheTypeConfiguration(t *testing.T) {
	ctx := context.Background()
	st := &typeOutageStore{Store: openWorkerStoreOn(t, "sqlite")}
	now := time.Now()
	pol, _ := json.Marshal(retry.Policy{MaxAttempts: 10, Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond})
	if _, err := st.PutType(ctx, store.TypeConfig{Type: "cfg.t", Policy: pol}, now); err != nil {
		t.Fatal(err)
	}
	res, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: NewID(now), Type: "cfg.t", Payload: []byte("null"), RunAt: now}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].Task.ID
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"cfg.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: 10 * time.Millisecond, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d tasks, %v", len(got), err)
	}
	st.down.Store(true)
	var logs logBuffer
	e, err := New(Config{Store: st, NodeID: "cfg-test", PollInterval: 20 * time.Millisecond,
		// At Debug: the passes after the first postpone at that level.
		Logger:        slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		DefaultPolicy: retry.Policy{MaxAttempts: 1, Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Let the reaper find the task in several passes while the
	// configuration is away.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), "reaping postponed") < 3 {
		if got, err := st.Store.GetTask(ctx, id); err == nil && got.State != store.StateRunning {
			t.Fatalf("reaped while its type configuration was unreadable: %s %s; want the reap postponed", got.State, got.DeadReason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reaper did not postpone the task 3 times in 10 s; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := st.GetTask(ctx, id); err != nil || got.State != store.StateRunning {
		t.Fatalf("while the type configuration was unreadable: %s, %v; want still running (reap postponed)", got.State, err)
	}
	st.down.Store(false)
	for {
		got, err := st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == store.StateDead {
			t.Fatalf("reaped task dead-lettered (%s) under a 10-attempt policy", got.DeadReason)
		}
		if got.State != store.StateRunning {
			break // retried under the stored policy
		}
		if time.Now().After(deadline) {
			t.Fatal("task not reaped 10 s after the configuration came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stuckStore counts the scheduler's passes (one NextWakeup each) and, while
// promoteDown is set, fails PromoteDue as a database does that still
// answers reads but refuses writes (a full disk, a lock held elsewhere).
type stuckStore struct {
	*typeOutageStore
	promoteDown atomic.Bool
	passes      atomic.Int64
}

func (s *stuckStore) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	if s.promoteDown.Load() {
		return 0, fmt.Errorf("promote due tasks: %w", store.ErrUnavailable)
	}
	return s.Store.PromoteDue(ctx, p)
}

func (s *stuckStore) NextWakeup(ctx context.Context, p store.WakeupParams) (store.Wakeup, error) {
	s.passes.Add(1)
	return s.Store.NextWakeup(ctx, p)
}

// TestStuckDueWorkDoesNotSpinTheScheduler: a due time already past that
// the scheduler's pass could not deal with (a lease the reaper leaves
// expired because its type's configuration cannot be read; a due task
// whose promotion fails) is still the earliest wake-up NextWakeup reports.
// The scheduler must not take it as a reason to run its next pass at once,
// over and over, for as long as the cause lasts: it tries again after the
// poll interval. Before, it ran ~200 passes a second here (under -race),
// each with its store calls and its warning.
func TestStuckDueWorkDoesNotSpinTheScheduler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, st *stuckStore) string // returns the stuck task's id
		state store.State                               // the stuck task's state meanwhile
	}{
		{"reap postponed", func(t *testing.T, st *stuckStore) string {
			now := time.Now()
			res, err := st.InsertTasks(context.Background(), store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: NewID(now), Type: "cfg.t", Payload: []byte("null"), RunAt: now}}})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := st.FetchTasks(context.Background(), store.FetchParams{Types: []string{"cfg.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: time.Millisecond, Now: now}); err != nil || len(got) != 1 {
				t.Fatalf("fetch: %d tasks, %v", len(got), err)
			}
			st.down.Store(true)
			return res[0].Task.ID
		}, store.StateRunning},
		{"promotion failing", func(t *testing.T, st *stuckStore) string {
			now := time.Now()
			res, err := st.InsertTasks(context.Background(), store.InsertParams{Now: now.Add(-time.Second), Tasks: []store.NewTask{{ID: NewID(now), Type: "cfg.t", Payload: []byte("null"), RunAt: now.Add(-time.Millisecond)}}})
			if err != nil {
				t.Fatal(err)
			}
			st.promoteDown.Store(true)
			return res[0].Task.ID
		}, store.StateScheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stuckStore{typeOutageStore: &typeOutageStore{Store: openWorkerStoreOn(t, "sqlite")}}
			id := tc.setup(t, st)
			const poll = 200 * time.Millisecond
			e := startWorkerEngine(t, st, Config{NodeID: "stuck-test", PollInterval: poll})
			waitFor(t, "the scheduler to lead", e.IsLeader)
			start, before := time.Now(), st.passes.Load()
			waitFor(t, "a second of scheduling", func() bool { return time.Since(start) >= time.Second })
			passes, elapsed := st.passes.Load()-before, time.Since(start)
			if limit := int64(elapsed/poll) + 3; passes > limit {
				t.Fatalf("%d scheduler passes in %v; want at most %d (one per poll interval %v)", passes, elapsed, limit, poll)
			}
			if got, err := st.GetTask(context.Background(), id); err != nil || got.State != tc.state {
				t.Fatalf("while stuck: %s, %v; want still %s", got.State, err, tc.state)
			}
		})
	}
}

// TestReaperPassesTasksOfAnUnreadableType: tasks whose type configuration
// cannot be read (here a policy with a field this binary does not know, as
// a newer version writes during a rolling upgrade) are left expired, but
// they must not keep the reaper from the other expired leases. Before, a
// full batch of them at the head of the expired-lease list came back from
// every listing, the reaper postponed it and stopped, and a task of a good
// type whose lease expired later was never reaped.
func TestReaperPassesTasksOfAnUnreadableType(t *testing.T) {
	backendtest.Run(t, testReaperPassesTasksOfAnUnreadableType)
}

func testReaperPassesTasksOfAnUnreadableType(t *testing.T, backend string) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, backend)
	now := time.Now()
	if _, err := st.PutType(ctx, store.TypeConfig{Type: "bad.t", Policy: []byte(`{"max_attempts":3,"field_from_a_newer_version":1}`)}, now); err != nil {
		t.Fatal(err)
	}
	const nbad = reapBatch + 10
	nts := make([]store.NewTask, 0, nbad)
	for i := range nbad {
		nts = append(nts, store.NewTask{ID: NewID(now.Add(time.Duration(i))), Type: "bad.t", Payload: []byte("null"), RunAt: now})
	}
	if _, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: nts}); err != nil {
		t.Fatal(err)
	}
	good, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: NewID(now.Add(time.Hour)), Type: "good.t", Payload: []byte("null"), RunAt: now}}})
	if err != nil {
		t.Fatal(err)
	}
	// A worker of another process leases them all, then dies; the good
	// task's lease expires last.
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"bad.t"}, Limit: nbad, WorkerID: "gone", LeaseDuration: time.Millisecond, Now: now}); err != nil || len(got) != nbad {
		t.Fatalf("fetch bad.t: %d tasks, %v", len(got), err)
	}
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"good.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: 2 * time.Millisecond, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch good.t: %d tasks, %v", len(got), err)
	}
	e := startWorkerEngine(t, st, Config{NodeID: "reap-hol-test"})
	waitFor(t, "the scheduler to lead", e.IsLeader)
	deadline := time.Now().Add(10 * time.Second)
	for e.Counters().Reaped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing reaped 10 s after the scheduler started: the %d expired tasks of the unreadable type ahead of the good.t task kept the reaper from it", nbad)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := st.GetTask(ctx, good[0].Task.ID); err != nil || got.State == store.StateRunning {
		t.Fatalf("good.t task: %s, %v; want reaped", got.State, err)
	}
	if c := e.Counters(); c.Reaped != 1 {
		t.Fatalf("Reaped = %d; want 1 (only the good type's task)", c.Reaped)
	}
	if got, err := st.GetTask(ctx, nts[0].ID); err != nil || got.State != store.StateRunning {
		t.Fatalf("bad.t task: %s, %v; want still running (reap postponed)", got.State, err)
	}
}

// TestReaperWakesForLeasesBehindAnUnreadableType: while an expired lease of
// a type whose configuration cannot be read stays expired (the reaper
// passes over it), the scheduler still wakes at the next lease expiry of
// another type. Before, NextWakeup kept reporting the passed lease's past
// expiry, which the scheduler ignored, so a later lease was reaped only at
// the next poll interval.
func TestReaperWakesForLeasesBehindAnUnreadableType(t *testing.T) {
	backendtest.Run(t, testReaperWakesForLeasesBehindAnUnreadableType)
}

func testReaperWakesForLeasesBehindAnUnreadableType(t *testing.T, backend string) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, backend)
	now := time.Now()
	if _, err := st.PutType(ctx, store.TypeConfig{Type: "bad.t", Policy: []byte(`{"max_attempts":3,"field_from_a_newer_version":1}`)}, now); err != nil {
		t.Fatal(err)
	}
	bad, good := NewID(now), NewID(now.Add(time.Millisecond))
	if _, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{
		{ID: bad, Type: "bad.t", Payload: []byte("null"), RunAt: now},
		{ID: good, Type: "good.t", Payload: []byte("null"), RunAt: now},
	}}); err != nil {
		t.Fatal(err)
	}
	// A worker of another process leased both and died: the bad type's
	// lease has expired, the good one's expires in two seconds.
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"bad.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: time.Millisecond, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch bad.t: %d tasks, %v", len(got), err)
	}
	const lease = 2 * time.Second
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"good.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: lease, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch good.t: %d tasks, %v", len(got), err)
	}
	e := startWorkerEngine(t, st, Config{NodeID: "reap-wake-test", PollInterval: time.Minute})
	waitFor(t, "the scheduler to lead", e.IsLeader)
	deadline := now.Add(lease + 5*time.Second) // far less than the poll interval
	for e.Counters().Reaped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the good.t lease, expired %v ago, was not reaped: the scheduler slept for its poll interval", time.Since(now.Add(lease)).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := st.GetTask(ctx, bad); err != nil || got.State != store.StateRunning {
		t.Fatalf("bad.t task: %s, %v; want still running (reap postponed)", got.State, err)
	}
}
