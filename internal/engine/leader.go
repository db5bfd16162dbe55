package engine

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// leaderName is the leadership lease of the scheduler loops.
const leaderName = "scheduler"

type leaderState struct {
	mu      sync.Mutex
	leading bool
	since   time.Time
	changed chan struct{} // capacity 1: the role changed since nodeLoop last wrote it
}

// IsLeader reports whether this node currently runs the scheduler loops.
func (e *Engine) IsLeader() bool {
	e.leading.mu.Lock()
	defer e.leading.mu.Unlock()
	return e.leading.leading
}

func (e *Engine) setLeading(v bool) {
	e.leading.mu.Lock()
	changed := e.leading.leading != v
	e.leading.leading = v
	if v {
		e.leading.since = time.Now()
	}
	e.leading.mu.Unlock()
	if changed {
		// The registry shows the new role now, not at the next heartbeat.
		select {
		case e.leading.changed <- struct{}{}:
		default:
		}
	}
}

// electionLoop competes for the scheduler lease and runs the scheduler loops
// while it holds it.
//
// Safety argument (no two leaders at once): a renewal written at database
// time T (the caller's now, taken before the statement is sent) makes the
// row valid until T+TTL, and no other node can take the row before that. The
// holder records the local monotonic instant S at which it took that now
// (S <= the write) and considers itself leader only until S+TTL-margin. So
// the holder's loops are cancelled at least `margin` before anyone else may
// acquire, as long as clocks across nodes agree within margin (NTP). A
// failed or refused renewal stops the loops at once. See docs/architecture.md.
func (e *Engine) electionLoop(ctx context.Context) {
	ttl := e.cfg.LeaderTTL
	renew := ttl / 4
	margin := ttl / 4
	var (
		loopsCancel context.CancelFunc
		loopsDone   chan struct{}
		validUntil  time.Time // monotonic
		watchdog    *time.Timer
	)
	// loopsRunning reports whether the loops are still running (the watchdog
	// may have stopped them on its own).
	loopsRunning := func() bool {
		if loopsDone == nil {
			return false
		}
		select {
		case <-loopsDone:
			return false
		default:
			return true
		}
	}
	stop := func(why string) {
		if loopsCancel == nil {
			return
		}
		loopsCancel()
		<-loopsDone
		loopsCancel, loopsDone = nil, nil
		if watchdog != nil {
			watchdog.Stop()
		}
		e.setLeading(false)
		e.log.Warn("leadership lost; scheduler loops stopped", "node", e.cfg.NodeID, "reason", why)
	}
	defer func() {
		if loopsCancel != nil {
			loopsCancel()
			<-loopsDone
			e.setLeading(false)
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = e.st.ReleaseLeader(rctx, store.LeaderParams{Name: leaderName, NodeID: e.cfg.NodeID, Now: e.now()})
			cancel()
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
		started := time.Now()
		now := e.now()
		actx, cancel := context.WithTimeout(ctx, renew)
		lease, err := e.st.AcquireLeader(actx, store.LeaderParams{Name: leaderName, NodeID: e.cfg.NodeID, TTL: ttl, Now: now})
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("leader lease renewal failed", "node", e.cfg.NodeID, "err", err)
			if loopsCancel != nil && time.Now().After(validUntil) {
				stop("renewal failed past the lease's safe end")
			}
		case lease.NodeID == e.cfg.NodeID:
			validUntil = started.Add(ttl - margin)
			if loopsCancel != nil && !loopsRunning() {
				stop("watchdog stopped the loops")
			}
			if loopsCancel != nil {
				// The watchdog cancels the loops at the lease's safe end
				// even if this goroutine is blocked in a slow renewal.
				watchdog.Reset(time.Until(validUntil))
			}
			if loopsCancel == nil {
				lctx, lcancel := context.WithCancel(ctx)
				done := make(chan struct{})
				loopsCancel, loopsDone = lcancel, done
				e.setLeading(true)
				e.log.Info("elected leader; starting scheduler loops", "node", e.cfg.NodeID)
				watchdog = time.AfterFunc(time.Until(validUntil), lcancel)
				go func() {
					defer close(done)
					e.runScheduler(lctx)
				}()
			}
		default:
			stop("lease held by " + lease.NodeID)
		}
		// Wake for the next renewal, or at the safe end of the lease if that
		// comes first (then the failed-renewal branch stops the loops).
		wait := renew
		if loopsCancel != nil {
			if until := time.Until(validUntil); until < wait {
				wait = until
			}
		}
		resetTimer(timer, wait)
		if loopsCancel != nil && time.Now().After(validUntil) {
			stop("lease not renewed in time")
		}
	}
}

// nodeLoop keeps this node's registry row fresh: every 5 seconds, and at
// once when the node gains or loses the leadership.
func (e *Engine) nodeLoop(ctx context.Context) {
	host, _ := os.Hostname()
	startedAt := e.now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		role := "standby"
		if e.IsLeader() {
			role = "leader"
		}
		if e.cfg.NoScheduler {
			role = "worker"
		}
		err := e.st.HeartbeatNode(ctx, store.Node{ID: e.cfg.NodeID, Host: host, Version: e.cfg.Version, Role: role, StartedAt: startedAt}, e.now())
		if err != nil && ctx.Err() == nil {
			e.log.Warn("node heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-e.leading.changed:
		}
	}
}
