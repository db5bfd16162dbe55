package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// errLeaseLost is the cancellation cause of a handler whose lease was lost.
var errLeaseLost = errors.New("lease lost: the task was reaped, cancelled or taken by another worker")

// errTaskCancelled is the cancellation cause of a handler whose task was
// cancelled while it ran (a lost lease, told at once instead of found by
// the next heartbeat).
var errTaskCancelled = fmt.Errorf("task cancelled: %w", errLeaseLost)

// leaseTable tracks the leases held by in-process handlers so one heartbeat
// loop can extend them all in a single batch.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]*heldLease
}

type heldLease struct {
	leaseID string
	cancel  context.CancelCauseFunc // nil while the task waits in a prefetch buffer
	lost    bool                    // a heartbeat found the lease gone
	expires time.Time               // as last granted or extended
}

func newLeaseTable() *leaseTable { return &leaseTable{m: make(map[string]*heldLease)} }

func (lt *leaseTable) add(taskID, leaseID string, expires time.Time) {
	lt.mu.Lock()
	lt.m[taskID] = &heldLease{leaseID: leaseID, expires: expires}
	lt.mu.Unlock()
}

// extended records a successful extension.
func (lt *leaseTable) extended(h *heldLease, until time.Time) {
	lt.mu.Lock()
	h.expires = until
	lt.mu.Unlock()
}

// expiredBy reports whether h's last known expiry has passed.
func (lt *leaseTable) expiredBy(h *heldLease, now time.Time) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return !h.expires.IsZero() && now.After(h.expires)
}

// start attaches a running handler's cancel function to its lease. It
// reports false when the lease was lost while the task waited to start.
func (lt *leaseTable) start(taskID string, cancel context.CancelCauseFunc) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	h := lt.m[taskID]
	if h == nil || h.lost {
		return false
	}
	h.cancel = cancel
	return true
}

// holds reports whether h is still the lease held for taskID.
func (lt *leaseTable) holds(taskID string, h *heldLease) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.m[taskID] == h
}

// markLost records that a lease is gone and cancels its handler if running.
func (lt *leaseTable) markLost(h *heldLease) {
	lt.mu.Lock()
	h.lost = true
	cancel := h.cancel
	lt.mu.Unlock()
	if cancel != nil {
		cancel(errLeaseLost)
	}
}

// leaseOf returns the lease id held for taskID ("" if none).
func (lt *leaseTable) leaseOf(taskID string) string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if h := lt.m[taskID]; h != nil {
		return h.leaseID
	}
	return ""
}

// cancelled records that taskID was cancelled while leaseID was held: if
// this process still holds that lease, the lease is lost and its handler
// (if started) is cancelled with errTaskCancelled. It reports whether the
// lease was held here.
func (lt *leaseTable) cancelled(taskID, leaseID string) bool {
	lt.mu.Lock()
	h := lt.m[taskID]
	if h == nil || h.leaseID != leaseID || h.lost {
		lt.mu.Unlock()
		return false
	}
	h.lost = true
	cancel := h.cancel
	lt.mu.Unlock()
	if cancel != nil {
		cancel(errTaskCancelled)
	}
	return true
}

func (lt *leaseTable) remove(taskID string) {
	lt.mu.Lock()
	delete(lt.m, taskID)
	lt.mu.Unlock()
}

func (lt *leaseTable) snapshot() ([]store.LeaseRef, []*heldLease) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	refs := make([]store.LeaseRef, 0, len(lt.m))
	held := make([]*heldLease, 0, len(lt.m))
	for id, h := range lt.m {
		refs = append(refs, store.LeaseRef{TaskID: id, LeaseID: h.leaseID})
		held = append(held, h)
	}
	return refs, held
}

// heartbeatLoop extends every in-process lease each third of the lease
// duration. A lease found lost cancels its handler's context.
func (e *Engine) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(e.cfg.LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		refs, held := e.leases.snapshot()
		if len(refs) == 0 {
			continue
		}
		now := e.now()
		for i := range refs {
			refs[i].ExpiresAt = now.Add(e.cfg.LeaseDuration)
		}
		for start := 0; start < len(refs); start += 1000 {
			end := min(start+1000, len(refs))
			errs, err := e.st.ExtendLeases(ctx, store.ExtendParams{Leases: refs[start:end], Now: now})
			if err != nil {
				// The database is away: leases cannot be extended. Once a
				// lease's last granted expiry passes, another worker may be
				// given the task, so stop its handler here.
				e.log.Warn("heartbeat failed", "leases", end-start, "err", err)
				for i := start; i < end; i++ {
					if e.leases.expiredBy(held[i], e.now()) && e.leases.holds(refs[i].TaskID, held[i]) {
						e.log.Warn("lease expired without a heartbeat; cancelling handler", "task_id", refs[i].TaskID)
						e.leases.markLost(held[i])
					}
				}
				continue
			}
			for i, err := range errs {
				if err == nil {
					e.leases.extended(held[start+i], refs[start+i].ExpiresAt)
				}
				if err != nil && e.leases.holds(refs[start+i].TaskID, held[start+i]) {
					// Still held here, yet gone in the store: reaped,
					// cancelled or expired. (A lease whose task finished
					// since the snapshot is simply no longer held.)
					e.log.Warn("lease lost; cancelling handler", "task_id", refs[start+i].TaskID, "err", err)
					e.leases.markLost(held[start+i])
				}
			}
		}
	}
}
