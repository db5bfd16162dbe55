package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// clockedLeaderStore is a leaderStore over PostgreSQL that keeps the
// store's clock (store.DatabaseClock), as the engine sees a PostgreSQL
// store.
type clockedLeaderStore struct {
	*leaderStore
	dc store.DatabaseClock
}

func (s clockedLeaderStore) DatabaseNow(ctx context.Context) (time.Time, error) {
	return s.dc.DatabaseNow(ctx)
}

// TestLateWatchdogDoesNotLetTwoLeadersPromote: node-a leads, then stops
// renewing (its renewal hangs) and its watchdog runs late, as in a process
// that was stopped past its lease's safe end (SIGSTOP, a frozen VM): on
// resume its timers and goroutines run in no set order, so its scheduler
// may get to its next statement before the watchdog cancels it. node-b
// takes the expired lease. node-a's scheduler must send nothing once its
// lease's safe end (on its monotonic clock) has passed, whatever its
// timers: before, it went on promoting every poll interval, beside node-b.
func TestLateWatchdogDoesNotLetTwoLeadersPromote(t *testing.T) {
	const ttl = time.Second // renewals every 250 ms, safe end 750 ms after a renewal starts
	url := pgtest.URL(t)
	pgA, pgB := openPG(t, url), openPG(t, url)
	stA := &leaderStore{Store: pgA}
	release := make(chan struct{})
	defer close(release)
	var (
		a         *Engine
		mu        sync.Mutex
		leadCall  time.Time   // when the lease call that made node-a lead began (after its S)
		sent      []time.Time // node-a's promotions sent with a live context: when
		deadlines []time.Time // and their contexts' deadlines
	)
	// node-a's calls go through until it leads; its renewals hang. Not
	// "the first call goes through": on a loaded machine that one can be
	// cut off by its bound (TTL/4), and node-a, hung in its next attempt,
	// never led. The calls are made by the goroutine that sets the role
	// (only the watchdog, delayed here, clears it elsewhere), so one made
	// while node-a leads is a renewal, and the last one that went through
	// is the one whose lease made it lead.
	stA.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if !a.IsLeader() {
			mu.Lock()
			leadCall = time.Now()
			mu.Unlock()
			return stA.Store.AcquireLeader(ctx, p)
		}
		<-release // the renewals hang, whatever their context
		return store.Lease{}, context.DeadlineExceeded
	}
	stA.promote = func(ctx context.Context, _ int) {
		if ctx.Err() == nil {
			dl, _ := ctx.Deadline()
			mu.Lock()
			sent = append(sent, time.Now())
			deadlines = append(deadlines, dl)
			mu.Unlock()
		}
	}
	var err error
	a, err = New(Config{Store: clockedLeaderStore{stA, pgA}, NodeID: "node-a", Version: "test", LeaderTTL: ttl, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.leading.afterFunc = func(d time.Duration, f func()) *time.Timer { return time.AfterFunc(d+time.Hour, f) }
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	waitFor(t, "node-a to lead", a.IsLeader)

	// node-b counts its promotions once it leads.
	passes := make(chan struct{}, 100)
	stB := &leaderStore{Store: pgB}
	stB.promote = func(context.Context, int) {
		select {
		case passes <- struct{}{}:
		default:
		}
	}
	b := startLeaderEngine(t, clockedLeaderStore{stB, pgB}, "node-b", ttl, nil)
	waitFor(t, "node-b to take the expired lease", b.IsLeader)
	// node-b's loops run a few passes (one per poll interval), and node-a's
	// would promote beside them.
	for range 4 {
		recvWithin(t, passes, 5*time.Second, "a promotion on node-b")
	}

	mu.Lock()
	defer mu.Unlock()
	// The safe end is 750 ms after node-a's S, which came before the lease
	// call that made it lead. A call made after it, and able to run past
	// it, is late (50 ms of slack for a call made just before it).
	safeEnd := leadCall.Add(ttl - ttl/4)
	late := 0
	for i, at := range sent {
		if at.After(safeEnd.Add(50*time.Millisecond)) && deadlines[i].After(safeEnd) {
			late++
		}
	}
	if late > 0 {
		t.Fatalf("node-a sent %d promotions after its lease's safe end (%d in all), while node-b leads; want none", late, len(sent))
	}
}

// TestCloseDuringRenewalLeavesTheLeaseFree: Close while a renewal is in
// flight. The renewal's statement has reached the database and commits
// whatever becomes of its reply; cut short by the close, it committed after
// the release, and the lease stayed the closed node's for a whole TTL, so
// no standby could take over for TTL + TTL/4 instead of one renewal
// interval. Close now lets the attempt finish (it is bounded by TTL/4)
// before it releases the lease.
func TestCloseDuringRenewalLeavesTheLeaseFree(t *testing.T) {
	// Renewals every 2 s, each bounded by 2 s: the slow one below commits
	// 200 ms into its bound, which leaves a loaded machine's statement
	// time to finish within it.
	const ttl = 8 * time.Second
	st := &leaderStore{Store: openPG(t, pgtest.URL(t))}
	inFlight := make(chan struct{})
	committed := make(chan struct{})
	// The slow call is the first one made while the node leads, a renewal
	// (the role is set by the goroutine making the calls), not the second
	// call: on a loaded machine the first one can be cut off by its bound,
	// and the second, an attempt, then made the node lead and no renewal
	// was in flight at Close.
	var (
		node atomic.Pointer[Engine]
		slow atomic.Bool
	)
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if e := node.Load(); e == nil || !e.IsLeader() || !slow.CompareAndSwap(false, true) {
			return st.Store.AcquireLeader(ctx, p)
		}
		close(inFlight)
		// The database takes 200 ms to run the statement; a caller that
		// gives up first gets no reply, and the statement commits anyway.
		done := make(chan struct {
			l   store.Lease
			err error
		}, 1)
		go func() {
			time.Sleep(200 * time.Millisecond)
			l, err := st.commit(ctx, p)
			close(committed)
			done <- struct {
				l   store.Lease
				err error
			}{l, err}
		}()
		select {
		case r := <-done:
			return r.l, r.err
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		}
	}
	e := startLeaderEngine(t, st, "closing-leader", ttl, nil)
	node.Store(e)
	waitFor(t, "the node to lead", e.IsLeader)
	recvWithin(t, inFlight, 10*time.Second, "a renewal")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, committed, 5*time.Second, "the renewal's commit")
	l, err := st.GetLeader(context.Background(), leaderName)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after Close the lease is %+v (err %v); want it released", l, err)
	}
}

// lateHeartbeatStore is a leaderStore whose first registry write of role
// leader takes the database 200 ms, and commits even when its caller gives
// up first (the statement was sent).
type lateHeartbeatStore struct {
	*leaderStore
	inFlight, committed chan struct{}
	once                sync.Once
}

func (s *lateHeartbeatStore) HeartbeatNode(ctx context.Context, n store.Node, now time.Time) error {
	first := false
	if n.Role == RoleLeader {
		s.once.Do(func() { first = true })
	}
	if !first {
		return s.leaderStore.HeartbeatNode(ctx, n, now)
	}
	close(s.inFlight)
	done := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		err := s.leaderStore.HeartbeatNode(context.WithoutCancel(ctx), n, now)
		close(s.committed)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestCloseDuringRegistryWriteRecordsStopped: Close while a registry write
// is in flight. Cut short by the close, that write committed after the
// last one (role stopped), and the registry showed the closed node alive
// for 30 s. Close now lets it finish (it is bounded by 5 s) first.
func TestCloseDuringRegistryWriteRecordsStopped(t *testing.T) {
	st := &lateHeartbeatStore{leaderStore: &leaderStore{Store: openPG(t, pgtest.URL(t))},
		inFlight: make(chan struct{}), committed: make(chan struct{})}
	e := startLeaderEngine(t, st, "closing-node", time.Second, nil)
	recvWithin(t, st.inFlight, 10*time.Second, "the registry write of role leader")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, st.committed, 5*time.Second, "the registry write's commit")
	ns, err := st.ListNodes(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || ns[0].Role != RoleStopped {
		t.Fatalf("registry after Close: %+v; want closing-node with role %q", ns, RoleStopped)
	}
}
