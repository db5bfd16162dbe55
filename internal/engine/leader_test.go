package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// leaderStore is a real SQLite store whose leader-lease calls can be slowed
// down or failed (acquire) and whose scheduler promotions can be held
// (promote), and which records every scheduler-loop instance: the distinct
// contexts its PromoteDue is called with, in order (the scheduler passes its
// leadership context straight to PromoteDue).
type leaderStore struct {
	store.Store
	// acquire, when set, replaces AcquireLeader; call counts from 1. It
	// may commit through s.commit, which ignores the call's deadline.
	acquire func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error)
	// promote, when set, runs before PromoteDue of loop instance gen
	// (from 0) goes through.
	promote func(ctx context.Context, gen int)
	// heartbeat, when set, runs before HeartbeatNode call number call
	// (from 1) goes through.
	heartbeat func(ctx context.Context, call int)

	mu        sync.Mutex
	calls     int               // AcquireLeader calls started
	nodeCalls int               // HeartbeatNode calls started
	completed int               // AcquireLeader calls returned
	loops     []context.Context // scheduler-loop instances, in order
	releases  atomic.Int64      // ReleaseLeader calls
}

func (s *leaderStore) AcquireLeader(ctx context.Context, p store.LeaderParams) (store.Lease, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	var (
		l   store.Lease
		err error
	)
	if s.acquire != nil {
		l, err = s.acquire(ctx, n, p)
	} else {
		l, err = s.Store.AcquireLeader(ctx, p)
	}
	s.mu.Lock()
	s.completed++
	s.mu.Unlock()
	return l, err
}

// commit writes the lease whatever happens to ctx: the statement reached
// the database, only its reply is slow or lost.
func (s *leaderStore) commit(ctx context.Context, p store.LeaderParams) (store.Lease, error) {
	return s.Store.AcquireLeader(context.WithoutCancel(ctx), p)
}

func (s *leaderStore) ReleaseLeader(ctx context.Context, p store.LeaderParams) error {
	s.releases.Add(1)
	return s.Store.ReleaseLeader(ctx, p)
}

func (s *leaderStore) HeartbeatNode(ctx context.Context, n store.Node, now time.Time) error {
	s.mu.Lock()
	s.nodeCalls++
	call := s.nodeCalls
	s.mu.Unlock()
	if s.heartbeat != nil {
		s.heartbeat(ctx, call)
	}
	return s.Store.HeartbeatNode(ctx, n, now)
}

func (s *leaderStore) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	loop := ctx // the loops' own context, of which each call's is a child
	if lc, ok := ctx.Value(schedLoopKey{}).(context.Context); ok {
		loop = lc
	}
	s.mu.Lock()
	gen := len(s.loops) - 1
	if gen < 0 || s.loops[gen] != loop {
		s.loops = append(s.loops, loop)
		gen++
	}
	s.mu.Unlock()
	if s.promote != nil {
		s.promote(ctx, gen)
	}
	return s.Store.PromoteDue(ctx, p)
}

// acquired returns how many AcquireLeader calls have returned.
func (s *leaderStore) acquired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed
}

// loopInstances returns the scheduler-loop instances seen so far.
func (s *leaderStore) loopInstances() []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]context.Context(nil), s.loops...)
}

// newLeaderStore opens a SQLite store for a leaderStore, closed when t ends.
func newLeaderStore(t *testing.T) *leaderStore {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "leader.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &leaderStore{Store: st}
}

// startLeaderEngine starts an engine named node with the given leader TTL
// over st; it is closed when t ends (closing twice is harmless).
func startLeaderEngine(t *testing.T, st store.Store, node string, ttl time.Duration, clock Clock) *Engine {
	t.Helper()
	e, err := New(Config{Store: st, NodeID: node, Version: "test", LeaderTTL: ttl, PollInterval: 50 * time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestSlowRenewalsKeepTheLeadership: renewals are scheduled from when the
// previous one started, so slow but successful renewals never let the
// watchdog (which counts from a renewal's start) stop the loops. Scheduling
// them from when the previous one ended, as before, stops the loops in both
// cases: the first renewal comes back after the watchdog fired.
func TestSlowRenewalsKeepTheLeadership(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		// slow answers the call-th AcquireLeader.
		slow  func(s *leaderStore, ctx context.Context, call int, p store.LeaderParams) (store.Lease, error)
		calls int // calls to watch
	}{
		{
			// Every call commits, then replies 1.2 renewal intervals (2 s
			// each) after it began, later than the call's deadline:
			// renewals start back to back and each returns 1.2 s before
			// the previous one's safe end. Ended plus interval, the second
			// one would return 0.8 s after it. The replies are timed from
			// the call's start, not from the commit's end, and the
			// intervals are long, so that a loaded machine's slow commits
			// and late goroutines do not eat the margin.
			name: "replies past the deadline",
			ttl:  8 * time.Second,
			slow: func(s *leaderStore, ctx context.Context, _ int, p store.LeaderParams) (store.Lease, error) {
				reply := time.Now().Add(2400 * time.Millisecond)
				l, err := s.commit(ctx, p)
				time.Sleep(time.Until(reply))
				return l, err
			},
			calls: 5,
		},
		{
			// Acquired in 0.8 s, then a renewal that times out (2 s), then
			// one that takes 0.8 s again: started at 4 s, it returns at
			// 4.8 s, 1.2 s before the first lease's safe end at 6 s. Ended
			// plus interval, it would start at 6.8 s, after the watchdog
			// fired.
			name: "slow, timed out, slow",
			ttl:  8 * time.Second,
			slow: func(s *leaderStore, ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
				reply := time.Now().Add(800 * time.Millisecond)
				if call == 2 {
					<-ctx.Done()
					return store.Lease{}, ctx.Err()
				}
				l, err := s.Store.AcquireLeader(ctx, p)
				if call == 1 || call == 3 {
					time.Sleep(time.Until(reply))
				}
				return l, err
			},
			calls: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newLeaderStore(t)
			st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
				return tc.slow(st, ctx, call, p)
			}
			e := startLeaderEngine(t, st, "slow-node", tc.ttl, nil)
			// Up to 12 s of slow calls: longer than waitFor's bound.
			for deadline := time.Now().Add(30 * time.Second); st.acquired() < tc.calls; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for %d lease calls (%d so far)", tc.calls, st.acquired())
				}
			}
			loops := st.loopInstances()
			if len(loops) != 1 || loops[0].Err() != nil || !e.IsLeader() {
				t.Fatalf("after %d slow lease calls: %d scheduler-loop instances (first cancelled: %v), leader %v; want the first one still running",
					tc.calls, len(loops), len(loops) > 0 && loops[0].Err() != nil, e.IsLeader())
			}
		})
	}
}

// TestWatchdogFiringDuringRenewalRestartsLoops: a renewal that succeeds but
// comes back just after the watchdog cancelled the loops, while the loops
// are still finishing a statement, stops what is left of them and starts
// them again at once. Before, the still-running loops hid the fired
// watchdog: the node kept saying it led with no loops until the next
// renewal, a renewal interval (1 s here) later.
func TestWatchdogFiringDuringRenewalRestartsLoops(t *testing.T) {
	t.Parallel()
	const ttl = 4 * time.Second // renewals every 1 s, safe end 3 s after a renewal starts
	st := newLeaderStore(t)
	firstLoops := make(chan context.Context, 1)
	st.promote = func(ctx context.Context, gen int) {
		if gen != 0 {
			return
		}
		firstLoops <- ctx
		// The first loops are busy in a statement that outlives their
		// cancellation by 200 ms.
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond)
	}
	renewed := make(chan struct{})
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if call != 2 {
			return st.Store.AcquireLeader(ctx, p)
		}
		// The first renewal commits, and its reply comes back only after
		// the watchdog fired (at the first lease's safe end).
		l, err := st.commit(ctx, p)
		select {
		case loops := <-firstLoops:
			select {
			case <-loops.Done():
			case <-time.After(10 * time.Second):
			}
		case <-time.After(10 * time.Second):
		}
		close(renewed)
		return l, err
	}
	e := startLeaderEngine(t, st, "watchdog-node", ttl, nil)
	select {
	case <-renewed:
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for the slow renewal")
	}
	back := time.Now()
	waitFor(t, "the scheduler loops to start again", func() bool { return len(st.loopInstances()) >= 2 })
	if took := time.Since(back); took > 600*time.Millisecond {
		t.Errorf("the loops started again %s after the renewal came back; want at once (after the 200 ms statement)", took)
	}
	loops := st.loopInstances()
	if loops[0].Err() == nil || loops[1].Err() != nil || !e.IsLeader() {
		t.Errorf("first loops cancelled %v, second loops cancelled %v, leader %v; want true, false, true",
			loops[0].Err() != nil, loops[1].Err() != nil, e.IsLeader())
	}
}

// TestCloseReleasesLeaseAfterLoopsStopped: renewals whose replies are lost
// still commit, so the row stays this node's after its loops stopped at
// the lease's safe end. Close must still delete it, so that a standby can
// take over at once rather than after the TTL. Before, Close skipped the
// release when the loops were not running.
func TestCloseReleasesLeaseAfterLoopsStopped(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	st := newLeaderStore(t)
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		l, err := st.commit(ctx, p)
		if call > 1 && err == nil {
			err = fmt.Errorf("renew: reply lost: %w", store.ErrUnavailable)
		}
		return l, err
	}
	e := startLeaderEngine(t, st, "lost-replies", ttl, nil)
	waitFor(t, "the node to lead", e.IsLeader)
	waitFor(t, "the loops to stop at the lease's safe end", func() bool { return !e.IsLeader() })
	other := func() string {
		t.Helper()
		l, err := st.Store.AcquireLeader(context.Background(), store.LeaderParams{Name: leaderName, NodeID: "other", TTL: ttl, Now: time.Now()})
		if err != nil {
			t.Fatalf("AcquireLeader(other): %v", err)
		}
		return l.NodeID
	}
	if holder := other(); LeaseHolderNode(holder) != "lost-replies" {
		t.Fatalf("lease holder before Close = %q; want lost-replies (its renewals commit)", holder)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.releases.Load(); n != 1 {
		t.Errorf("Close released the lease %d times; want 1", n)
	}
	if holder := other(); holder != "other" {
		t.Errorf("another node acquiring right after Close got a lease held by %q; want it free", holder)
	}
}

// TestCloseRecordsStoppedRole: a closed engine leaves its registry row with
// role "stopped", so the registry does not show it as a live leader.
func TestCloseRecordsStoppedRole(t *testing.T) {
	t.Parallel()
	st := newLeaderStore(t)
	e := startLeaderEngine(t, st, "closing-node", time.Second, nil)
	role := func() string {
		t.Helper()
		ns, err := st.ListNodes(context.Background(), time.Time{})
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		for _, n := range ns {
			if n.ID == "closing-node" {
				return n.Role
			}
		}
		return ""
	}
	waitFor(t, "the node to record itself as leader", func() bool { return role() == RoleLeader })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := role(); got != RoleStopped {
		t.Fatalf("role after Close = %q; want %q", got, RoleStopped)
	}
}

// TestRegistryOutlivesAStuckHeartbeat: a registry write that hangs (its
// connection cut silently, a lock held by an operator) gives up after the
// registry's heartbeat interval, so the node's row still follows its role.
// The writes had no bound of their own: the first one, stuck on a dead
// connection, held the node loop until the engine closed (on a real cut,
// until the kernel gave up on the connection, a quarter of an hour), and
// the registry showed the leader as a standby, then as gone.
func TestRegistryOutlivesAStuckHeartbeat(t *testing.T) {
	t.Parallel()
	st := newLeaderStore(t)
	st.heartbeat = func(ctx context.Context, call int) {
		if call == 1 {
			<-ctx.Done() // the first write hangs until its caller gives up
		}
	}
	e := startLeaderEngine(t, st, "stuck-registry", time.Second, nil)
	waitFor(t, "the node to lead", e.IsLeader)
	waitFor(t, "the registry to show the node as leader", func() bool {
		ns, err := st.ListNodes(context.Background(), time.Time{})
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		return len(ns) == 1 && ns[0].Role == RoleLeader
	})
}

// TestSameNodeIDOneLeader: two engines that share a node id (a restart
// whose new process starts before the old one exits) compete like two
// nodes: at most one leads at any time, and when the leader closes, its
// release leaves the other's lease alone and the other takes over. The
// lease used to belong to the node id, so both led at once.
func TestSameNodeIDOneLeader(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	const ttl = time.Second
	a := startLeaderEngine(t, st, "same-id", ttl, nil)
	b := startLeaderEngine(t, st, "same-id", ttl, nil)
	waitFor(t, "one of them to lead", func() bool { return a.IsLeader() || b.IsLeader() })
	deadline := time.Now().Add(3 * ttl / 2)
	for time.Now().Before(deadline) {
		if a.IsLeader() && b.IsLeader() {
			t.Fatal("two engines with one node id lead at once")
		}
		time.Sleep(5 * time.Millisecond)
	}
	leader, other := a, b
	if b.IsLeader() {
		leader, other = b, a
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other engine to take over", other.IsLeader)
	if LeaseHolderNode(other.holder) != "same-id" || other.holder == leader.holder {
		t.Fatalf("holders %q and %q", leader.holder, other.holder)
	}
}

func TestLeaseHolderNode(t *testing.T) {
	for holder, want := range map[string]string{"n1#ab12": "n1", "a#b#c0": "a#b", "plain": "plain"} {
		if got := LeaseHolderNode(holder); got != want {
			t.Errorf("LeaseHolderNode(%q) = %q, want %q", holder, got, want)
		}
	}
	if h := newHolder("n1"); LeaseHolderNode(h) != "n1" || h == newHolder("n1") {
		t.Errorf("newHolder(n1) = %q: want n1#token, different each time", h)
	}
}

// TestStandbyLogsAttemptNotRenewal: a node that does not lead and cannot
// reach the lease logs a failed attempt to take it, not a failed
// "renewal", which reads as if it were the leader losing its lease; a
// leader whose renewal fails still logs a renewal.
func TestStandbyLogsAttemptNotRenewal(t *testing.T) {
	st := newLeaderStore(t)
	down := errors.New("database down")
	// The calls fail once one took the lease: a first attempt cut off by
	// its bound (TTL/4) on a loaded machine left a node that never led,
	// whose failures were all attempts.
	var led atomic.Bool
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if !led.Load() {
			l, err := st.Store.AcquireLeader(ctx, p)
			led.Store(err == nil)
			return l, err
		}
		return store.Lease{}, down
	}
	logs := &logBuffer{}
	// At Debug: after the first failure of an outage, a warning, the
	// attempts are logged at Debug ("... failed again").
	e, err := New(Config{Store: st, NodeID: "standby", LeaderTTL: time.Second, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// A call takes the lease; the next, the first renewal, fails: a renewal.
	// The loops stop at the lease's safe end; the calls after that are a
	// standby's attempts.
	// A failed attempt before the node first led (cut off by its bound)
	// is an attempt too: the one that counts comes after the renewal.
	waitFor(t, "a failed renewal and then a failed attempt", func() bool {
		s := logs.String()
		i := strings.Index(s, "leader lease renewal failed")
		return i >= 0 && strings.Contains(s[i:], "leader lease attempt failed")
	})
	s := logs.String()
	if lost := strings.Index(s, "leadership lost"); lost < 0 || strings.LastIndex(s, "leader lease renewal failed") > lost {
		t.Fatalf("a renewal failure was logged after the leadership was lost (by a standby):\n%s", s)
	}
}

// TestSQLiteProcessesShareOneLeader: two processes on one SQLite file (two
// stores opened on it, each with its engine) elect one leader through the
// file's lease row, as nodes on PostgreSQL do: the scheduler loops do not
// run in both. When the leader closes, the other takes over.
func TestSQLiteProcessesShareOneLeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	open := func() store.Store {
		st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Synchronous: "NORMAL"})
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	const ttl = time.Second
	a := startLeaderEngine(t, open(), "proc-a", ttl, nil)
	b := startLeaderEngine(t, open(), "proc-b", ttl, nil)
	waitFor(t, "one of them to lead", func() bool { return a.IsLeader() || b.IsLeader() })
	for deadline := time.Now().Add(3 * ttl / 2); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if a.IsLeader() && b.IsLeader() {
			t.Fatal("two processes on one SQLite file lead at once")
		}
	}
	leader, other := a, b
	if b.IsLeader() {
		leader, other = b, a
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other process to take over", other.IsLeader)
}
