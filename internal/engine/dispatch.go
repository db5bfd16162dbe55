package engine

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// Direct dispatch: when an in-process worker has an idle handler for a task
// being enqueued in this process, the enqueue transaction inserts the task
// already leased to that worker and the task is handed over in memory. The
// fetch write, and the wait for it, drop out of the path from enqueue to
// handler start. A worker takes part only while it has no backlog (its last
// fetch came back short), so direct dispatch never lets a new task overtake
// older pending ones.

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
				l.byType[t] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
	}
	l.n--
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
// a local worker can start at once.
func (e *Engine) pickLocal(nts []store.NewTask, now time.Time) []dispatchPick {
	if !e.clockReady() {
		return nil // nothing leased on a clock not yet synced
	}
	var picks []dispatchPick
	for i := range nts {
		if nts[i].RunAt.After(now) {
			continue // scheduled: it will be fetched when due
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

// handOver gives the directly leased tasks to their workers after the
// insert committed (or gives the slots back when it did not lease them).
func (e *Engine) handOver(picks []dispatchPick, nts []store.NewTask, res []store.InsertResult, err error) {
	for _, p := range picks {
		if err != nil || p.idx >= len(res) {
			p.w.unreserve()
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

func newLeaseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "d" + hex.EncodeToString(b[:])
}
