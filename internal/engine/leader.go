package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// leaderName is the leadership lease of the scheduler loops.
const leaderName = "scheduler"

// The leadership lease is held in the name of this engine instance, not
// of its node id alone: the holder is "NODEID#TOKEN" with a token drawn
// when the engine is made. Two processes that share a node id (a restart
// whose new process starts before the old one exits, a copied
// configuration) are then two competitors, not one leader twice, and the
// old one's release cannot remove the new one's lease.
const holderSep = "#"

// newHolder returns the lease holder name of an engine with node id id.
func newHolder(id string) string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return id + holderSep + hex.EncodeToString(b[:])
}

// LeaseHolderNode returns the node id in a leadership lease's holder name.
func LeaseHolderNode(holder string) string {
	if i := strings.LastIndex(holder, holderSep); i >= 0 {
		return holder[:i]
	}
	return holder
}

// The roles a node records in the node registry (store.Node.Role).
const (
	// RoleLeader: the node holds the scheduler lease and runs the scheduler
	// loops.
	RoleLeader = "leader"
	// RoleStandby: the node competes for the scheduler lease but does not
	// hold it.
	RoleStandby = "standby"
	// RoleWorker: the node runs without the scheduler (Config.NoScheduler).
	RoleWorker = "worker"
	// RoleStopped: the node's engine closed. Its row is the last one it
	// wrote; the node is not alive, whatever its last-seen time.
	RoleStopped = "stopped"
)

type leaderState struct {
	mu      sync.Mutex
	leading bool
	since   time.Time
	term    uint64        // counts the times the loops started
	changed chan struct{} // capacity 1: the role changed since nodeLoop last wrote it
	// afterFunc starts the watchdog; nil is time.AfterFunc. A test delays
	// it, as a process stopped past its lease's safe end (SIGSTOP, a frozen
	// VM) runs its overdue timers in no set order with its goroutines.
	afterFunc func(time.Duration, func()) *time.Timer
	// remindEvery is how often a node whose lease attempts, or whose
	// scheduler loops' calls, keep failing says so again (outageLog);
	// 0 is outageReminder. Tests shorten it.
	remindEvery time.Duration
	// safeEnd is the safe end of the last successful renewal (its
	// S+TTL-margin, with a monotonic reading): schedCallCtx sends no
	// scheduler statement after it, whether the watchdog has run or not.
	safeEnd time.Time
}

// setSafeEnd records the safe end of a successful renewal (leaderState.safeEnd).
func (e *Engine) setSafeEnd(t time.Time) {
	e.leading.mu.Lock()
	e.leading.safeEnd = t
	e.leading.mu.Unlock()
}

// leaseSafeEnd returns the safe end of the last successful renewal (zero
// before the first).
func (e *Engine) leaseSafeEnd() time.Time {
	e.leading.mu.Lock()
	defer e.leading.mu.Unlock()
	return e.leading.safeEnd
}

// IsLeader reports whether this node currently runs the scheduler loops.
func (e *Engine) IsLeader() bool {
	e.leading.mu.Lock()
	defer e.leading.mu.Unlock()
	return e.leading.leading
}

func (e *Engine) setLeading(v bool) uint64 { return e.setLeadingIf(v, 0) }

// setLeadingIf sets the role, and when term is not 0 only if the loops are
// still in that term: a watchdog that fires late must not clear the role of
// loops started after it. It returns the current term.
func (e *Engine) setLeadingIf(v bool, term uint64) uint64 {
	e.leading.mu.Lock()
	if term != 0 && term != e.leading.term {
		cur := e.leading.term
		e.leading.mu.Unlock()
		return cur
	}
	changed := e.leading.leading != v
	e.leading.leading = v
	if v {
		e.leading.since = time.Now()
		e.leading.term++
	}
	cur := e.leading.term
	e.leading.mu.Unlock()
	if changed {
		// The registry shows the new role now, not at the next heartbeat.
		select {
		case e.leading.changed <- struct{}{}:
		default:
		}
	}
	return cur
}

// electionLoop competes for the scheduler lease and runs the scheduler loops
// while it holds it.
//
// Safety argument (no two leaders at once). The lease's expiry lives on one
// timeline: the database's clock when the store has a database server
// (store.DatabaseClock), else this process's clock (SQLite: every node is in
// one process, on one host). Each attempt takes the local monotonic instant
// S first, then reads the database's time T (so T is at or after the
// database's time at S) and writes the row valid until T+TTL. Every other
// node reads its Now from the same database clock, and takes the row only
// once its Now is after the expiry, so no one else can take it before
// database time T+TTL. The holder treats itself as leader only until
// S+TTL-margin on its monotonic clock: a watchdog cancels the loops then,
// even if the next renewal is stuck, and no loop call is sent after it
// even if the watchdog runs late (schedCallCtx). So the loops stop at least about
// margin before anyone else may start them, whatever the nodes' wall
// clocks say, as long as the database's clock and the holder's monotonic
// clock run at about the same rate (a 25% rate difference over one TTL
// would be needed to break it).
//
// Renewals start every TTL/4 counted from the start S of the previous one,
// so slow replies do not push them later and later past the watchdog. A
// failed renewal does not stop the loops: the last successful one keeps
// them safe until its S+TTL-margin (validUntil), when they stop unless a
// renewal succeeded meanwhile. A renewal that finds the lease held by
// another node stops them at once. See docs/architecture.md.
func (e *Engine) electionLoop(ctx context.Context) {
	ttl := e.cfg.LeaderTTL
	renew := ttl / 4
	margin := ttl / 4
	var (
		loopsCancel context.CancelFunc
		loopsDone   chan struct{}
		validUntil  time.Time // monotonic: the safe end of the last successful renewal
		watchdog    *time.Timer
		// seen is the node this one last found leading (itself included),
		// "" when unknown: a standby logs who leads when it changes, and
		// after failed attempts, so that every node's log follows the
		// leadership. out counts and logs the attempts failed in a row.
		seen string
		out  = outageLog{log: e.log, attrs: []any{"node", e.cfg.NodeID}, every: e.leading.remindEvery}
	)
	start := func() {
		lctx, lcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		loopsCancel, loopsDone = lcancel, done
		term := e.setLeading(true)
		attrs := []any{"node", e.cfg.NodeID}
		if seen != "" && seen != e.cfg.NodeID {
			attrs = append(attrs, "previous_leader", seen)
		}
		e.log.Info("elected leader; starting scheduler loops", attrs...)
		seen = e.cfg.NodeID
		// The watchdog cancels the loops at the lease's safe end even if this
		// goroutine is blocked in a slow renewal, and the node stops calling
		// itself leader (IsLeader, the registry) at once. Only halt stops it.
		after := e.leading.afterFunc
		if after == nil {
			after = time.AfterFunc
		}
		watchdog = after(time.Until(validUntil), func() {
			lcancel()
			e.setLeadingIf(false, term)
		})
		go func() {
			defer close(done)
			e.runScheduler(lctx)
		}()
	}
	// halt cancels the loops and waits until they returned.
	halt := func() {
		loopsCancel()
		<-loopsDone
		loopsCancel, loopsDone = nil, nil
		watchdog.Stop()
		e.setLeading(false)
	}
	stop := func(why string) {
		if loopsCancel == nil {
			return
		}
		halt()
		e.log.Warn("leadership lost; scheduler loops stopped", "node", e.cfg.NodeID, "reason", why)
	}
	defer func() {
		leading := loopsCancel != nil
		if leading {
			halt()
		}
		// Always give the row up, even when the loops had already stopped:
		// a renewal may have committed although it failed or came back too
		// late. ReleaseLeader only removes this node's own row.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := e.st.ReleaseLeader(rctx, store.LeaderParams{Name: leaderName, NodeID: e.holder, Now: e.now()})
		cancel()
		switch {
		case err != nil:
			e.log.Warn("leader lease release failed", "node", e.cfg.NodeID, "err", err)
		case leading:
			e.log.Info("leadership released", "node", e.cfg.NodeID)
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		started := time.Now() // S, before the lease's Now is read
		// Closing does not cut the attempt short: its statement may have
		// reached the database, which commits it whatever becomes of the
		// reply, and committed after the release below it would hold the
		// lease for a whole TTL after this node is gone. Close waits for it
		// instead (at most TTL/4).
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renew)
		lease, err := e.acquireLeader(actx, ttl)
		cancel()
		if ctx.Err() != nil {
			return // closing: the deferred release gives the row up
		}
		switch {
		case err != nil:
			// A leader's renewal, or a standby's attempt to take the
			// lease; logged once per outage and then at most once per
			// remindEvery, not at every attempt.
			what := "leader lease attempt"
			if loopsCancel != nil {
				what = "leader lease renewal"
			}
			out.failed(what, err)
			if loopsCancel != nil && !time.Now().Before(validUntil) {
				stop("renewal failed past the lease's safe end")
			}
		case lease.NodeID == e.holder:
			failed, after := out.ended()
			validUntil = started.Add(ttl - margin)
			e.setSafeEnd(validUntil)
			if !time.Now().Before(validUntil) {
				// Only a store that ignores the call's deadline gets here.
				stop("renewal came back after its own safe end")
				break
			}
			// Reset reports false when the watchdog already fired: the loops
			// are cancelled (or returning), so start them afresh.
			if loopsCancel != nil && !watchdog.Reset(time.Until(validUntil)) {
				stop("the watchdog stopped the loops before the renewal came back")
			}
			if loopsCancel == nil {
				start()
			} else if failed > 0 {
				// Logged once the loops are known to go on: a renewal
				// that came back after the watchdog stopped them is a
				// lost leadership and a new election above.
				e.log.Info("leader lease renewed again", "node", e.cfg.NodeID, "failed_renewals", failed, "after", after)
			}
		default:
			leader := LeaseHolderNode(lease.NodeID)
			failed, _ := out.ended()
			if loopsCancel != nil {
				stop("lease held by " + leader)
			} else if leader != seen || failed > 0 {
				e.log.Info("standing by; another node leads", "node", e.cfg.NodeID, "leader", leader)
			}
			seen = leader
		}
		// Wake for the next renewal, TTL/4 after this one started, or at the
		// safe end of the lease if that comes first (then the code below
		// stops the loops).
		wait := time.Until(started.Add(renew))
		if loopsCancel != nil {
			if until := time.Until(validUntil); until < wait {
				wait = until
			}
		}
		resetTimer(timer, wait) // a negative wait fires at once
		if loopsCancel != nil && !time.Now().Before(validUntil) {
			stop("lease not renewed in time")
		}
	}
}

// acquireLeader takes or renews the scheduler lease at the database's time
// when the store can read it (store.DatabaseClock), else at this node's.
func (e *Engine) acquireLeader(ctx context.Context, ttl time.Duration) (store.Lease, error) {
	if !e.clockReady() {
		return store.Lease{}, errClockUnsynced
	}
	now := e.now()
	if dc, ok := e.st.(store.DatabaseClock); ok {
		t, err := dc.DatabaseNow(ctx)
		if err != nil {
			return store.Lease{}, err
		}
		now = t
	}
	return e.st.AcquireLeader(ctx, store.LeaderParams{Name: leaderName, NodeID: e.holder, TTL: ttl, Now: now})
}

// RegistryNow is the time of the node registry: the database server's time
// when the store has a clock that every node shares (store.DatabaseClock),
// as for the leader lease, so that a node whose wall clock is wrong is not
// shown as gone (or as alive long after it stopped); else, and when the
// database cannot tell its time, this node's clock. Heartbeats are written
// at this time and GET /v1/nodes judges them against it.
func (e *Engine) RegistryNow(ctx context.Context) time.Time {
	if dc, ok := e.st.(store.DatabaseClock); ok {
		if t, err := dc.DatabaseNow(ctx); err == nil {
			return t
		}
	}
	return e.now()
}

// LeaderNode returns the node id of the engine that holds the scheduler
// lease at now, a time of the registry's clock (RegistryNow, the clock the
// lease is written at), or "" when no one holds it: never taken, given up,
// or expired (its holder died or lost the database). A lease is held up to
// and including its expiry instant. It writes nothing.
func (e *Engine) LeaderNode(ctx context.Context, now time.Time) (string, error) {
	l, err := e.st.GetLeader(ctx, leaderName)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read leader lease: %w", err)
	}
	if now.After(l.ExpiresAt) {
		return "", nil
	}
	return LeaseHolderNode(l.NodeID), nil
}

// nodeHeartbeat is the interval of the node registry's writes, and the
// bound of each one.
const nodeHeartbeat = 5 * time.Second

// nodeLoop keeps this node's registry row fresh: every 5 seconds, and at
// once when the node gains or loses the leadership. When the engine closes
// it lets a write in flight finish, then writes the row one last time with
// role "stopped", so that the registry does not show a node that is gone as
// alive (or as a second leader).
//
// Each write (with its read of the database's time) gives up after the
// heartbeat interval: one stuck on a dead connection would otherwise hold
// the loop, and the row would show a role the node no longer has, until the
// kernel gave up on the connection. Failed writes are logged once per
// outage (outageLog): "node heartbeat failed", then "node heartbeat works
// again".
func (e *Engine) nodeLoop(ctx context.Context) {
	host, _ := os.Hostname()
	sctx, cancel := context.WithTimeout(ctx, nodeHeartbeat)
	startedAt := e.RegistryNow(sctx)
	cancel()
	tick := time.NewTicker(nodeHeartbeat)
	defer tick.Stop()
	// A database that is away fails every write: warned about once per
	// outage, as the leader lease's attempts are, not every 5 seconds.
	out := outageLog{log: e.log, every: e.leading.remindEvery}
	write := func(ctx context.Context, role string) error {
		ctx, cancel := context.WithTimeout(ctx, nodeHeartbeat)
		defer cancel()
		n := store.Node{ID: e.cfg.NodeID, Host: host, Version: e.cfg.Version, Role: role, StartedAt: startedAt}
		return e.st.HeartbeatNode(ctx, n, e.RegistryNow(ctx))
	}
	for {
		role := RoleStandby
		if e.IsLeader() {
			role = RoleLeader
		}
		if e.cfg.NoScheduler {
			role = RoleWorker
		}
		// Closing does not cut the write short: its statement may have
		// reached the database, and committed after the last write below
		// it would show the node alive again (for 30 s). It has its own
		// bound.
		if err := write(context.WithoutCancel(ctx), role); err == nil {
			out.recovered("node heartbeat works again")
		} else if ctx.Err() == nil {
			out.failed("node heartbeat", err)
		}
		select {
		case <-ctx.Done():
			// ctx is done: the last write gets a short context of its own.
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := write(sctx, RoleStopped)
			cancel()
			if err != nil {
				e.log.Warn("node registry: recording the stop failed", "err", err)
			}
			return
		case <-tick.C:
		case <-e.leading.changed:
		}
	}
}
