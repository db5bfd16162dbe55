package engine

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// Direct dispatch: when an in-process worker has an idle handler for a task
// being enqueued in this process, the enqueue transaction inserts the task
// already leased to that worker and the task is handed over in memory. The
// fetch write, and the wait for it, drop out of the path from enqueue to
// handler start. A worker takes part only while it has no backlog (its last
// fetch came back short) and is neither fetching nor full, so direct
// dispatch does not let a new task overtake older pending ones (short of a
// task made pending by another path a moment before, whose wake-up the
// worker has not acted on yet); and the tasks of one commit are offered in
// dispatch order. A fetch for tasks the worker knows by name, with
// handlers set aside for all of them, leaves it open (see openFetch).

// locals registers the running in-process workers by type.
type locals struct {
	mu     sync.Mutex
	byType map[string][]*workerRun
	next   map[string]int // round-robin start per type
	n      int
}

func (l *locals) add(w *workerRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byType == nil {
		l.byType, l.next = make(map[string][]*workerRun), make(map[string]int)
	}
	for _, t := range w.cfg.Types {
		l.byType[t] = append(l.byType[t], w)
	}
	l.n++
}

func (l *locals) remove(w *workerRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range w.cfg.Types {
		ws := l.byType[t]
		for i := range ws {
			if ws[i] == w {
				ws = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			// No worker serves the type any more: a program that runs a
			// worker per scope, on types of its own, would otherwise
			// leave an entry for every type it ever served.
			delete(l.byType, t)
			delete(l.next, t)
		} else {
			l.byType[t] = ws
		}
	}
	l.n--
}

// active reports whether any local worker runs.
func (l *locals) active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n > 0
}

// reserve finds a local worker of typ with an idle handler and reserves a
// slot in it, or returns nil.
func (l *locals) reserve(typ string) *workerRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return nil
	}
	ws := l.byType[typ]
	start := l.next[typ]
	for i := range ws {
		w := ws[(start+i)%len(ws)]
		if w.tryReserve() {
			l.next[typ] = (start + i + 1) % len(ws)
			return w
		}
	}
	return nil
}

type dispatchPick struct {
	idx int
	w   *workerRun
}

// pickLocal attaches direct-dispatch leases to the due tasks of a batch that
// a local worker can start at once. The tasks are offered in dispatch order
// (highest priority, then earliest due, then id), as a fetch would lease
// them: when they are more than the idle handlers, those left pending are
// the ones a fetch would have left.
func (e *Engine) pickLocal(nts []store.NewTask, now time.Time) []dispatchPick {
	if !e.clockReady() {
		return nil // nothing leased on a clock not yet synced
	}
	if !e.locals.active() {
		return nil
	}
	due := make([]int, 0, len(nts))
	var keys map[string]bool
	for i := range nts {
		if k := nts[i].IdempotencyKey; k != "" {
			// A repeat of an earlier task's key is that task's duplicate,
			// never inserted: it must not take a handler from it.
			if keys[k] {
				continue
			}
			if keys == nil {
				keys = make(map[string]bool)
			}
			keys[k] = true
		}
		if !nts[i].RunAt.After(now) { // a scheduled task is fetched when due
			due = append(due, i)
		}
	}
	slices.SortStableFunc(due, func(a, b int) int {
		x, y := &nts[a], &nts[b]
		if x.Priority != y.Priority {
			return cmp.Compare(y.Priority, x.Priority)
		}
		if c := dueAt(x, now).Compare(dueAt(y, now)); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	var picks []dispatchPick
	pushed := e.pushTypes()
	for _, i := range due {
		if pushed.has(nts[i].Type) {
			continue // the engine delivers it: see push_types.go
		}
		w := e.locals.reserve(nts[i].Type)
		if w == nil {
			continue
		}
		nts[i].Lease = &store.NewLease{LeaseID: newLeaseID(), WorkerID: w.cfg.ID, Duration: e.cfg.LeaseDuration}
		picks = append(picks, dispatchPick{idx: i, w: w})
	}
	return picks
}

// dueAt is nt's run time as the store will take it: a zero one is now.
func dueAt(nt *store.NewTask, now time.Time) time.Time {
	if nt.RunAt.IsZero() {
		return now
	}
	return nt.RunAt
}

// handOver gives the directly leased tasks to their workers after the
// insert committed (or gives the slots back when it did not lease them).
//
// An insert that failed otherwise than as invalid (a connection lost, a
// deadline) may have committed all the same: its leases are released then,
// so that a task inserted after all is pending at once, its attempt not
// counted, rather than running under a lease nobody holds until the reaper
// counts the attempt that never ran. The store refuses the release of a
// task that was not inserted.
func (e *Engine) handOver(picks []dispatchPick, nts []store.NewTask, res []store.InsertResult, err error) {
	for _, p := range picks {
		if err != nil || p.idx >= len(res) {
			p.w.unreserve()
			if err != nil && !errors.Is(err, store.ErrInvalid) {
				e.releaseDispatched(&nts[p.idx])
			}
			continue
		}
		r := res[p.idx]
		if r.Duplicate || r.Task.State != store.StateRunning || r.Task.LeaseID != nts[p.idx].Lease.LeaseID {
			p.w.unreserve()
			continue
		}
		t := r.Task
		e.ctr.dispatched.Add(1)
		p.w.deliver(&t)
	}
}

// releaseDispatched releases the lease nt was to be inserted with, without
// waiting for the commit; a refusal (the task was not inserted, or not
// under that lease) is the expected answer and is not logged.
func (e *Engine) releaseDispatched(nt *store.NewTask) {
	t := &store.Task{ID: nt.ID, Type: nt.Type, Attempt: 1, LeaseID: nt.Lease.LeaseID}
	out := store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending}
	e.outcomes.submit(out, func(_ struct{}, err error) {
		if err == nil || !errors.Is(err, store.ErrLeaseLost) {
			e.logOutcome(t, &out, err)
		}
	})
}

func newLeaseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "d" + hex.EncodeToString(b[:])
}
