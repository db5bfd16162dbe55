package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/retryq/retryq/store"
)

// The backoff of an in-process worker whose fetches fail: fetchBackoffMin
// after the first failure, doubling with each failure in a row up to
// fetchBackoffMax, about the probe an idle worker makes at the default
// PollInterval. A wake-up (an enqueue or an outcome committed, a
// notification, the PostgreSQL listener reconnected: the store answers
// again) ends the wait early, but never sooner than fetchRetryFloor
// after the failure, so that wake-ups from a store whose fetches alone
// fail do not make a hot loop.
const (
	fetchBackoffMin = 10 * time.Millisecond
	fetchBackoffMax = time.Second
	fetchRetryFloor = 100 * time.Millisecond
)

// fetchRetry is the state of a fetch loop (an in-process worker's, a push
// fetcher's) while its fetches fail: the backoff, and the failures in a
// row, which it logs once per outage rather than once per attempt (a
// database away for a minute would otherwise log a line per loop every
// second; see outageLog): a warning at the first failure, the attempts in
// between at Debug with a reminder at most once a minute, and one line
// when a fetch works again with how many failed and for how long.
type fetchRetry struct {
	prefix  string        // of the lines' messages: "" or "push: "
	out     outageLog     // the failures
	backoff time.Duration // the next wait; 0 is fetchBackoffMin
}

// newFetchRetry returns the state of a fetch loop that logs on log, its
// messages after prefix ("" or "push: "), its lines naming the loop with
// attrs.
func newFetchRetry(log *slog.Logger, prefix string, attrs ...any) fetchRetry {
	return fetchRetry{prefix: prefix, out: outageLog{log: log, attrs: attrs, then: "; backing off"}}
}

// failed logs a failed fetch and waits its backoff (waitBackoff: cut short
// by a wake-up from sub, not below fetchRetryFloor), then doubles the
// backoff up to fetchBackoffMax.
func (r *fetchRetry) failed(ctx context.Context, sub <-chan struct{}, err error) {
	if r.backoff <= 0 {
		r.backoff = fetchBackoffMin
	}
	r.out.failed(r.prefix+"fetch", err, "backoff", r.backoff)
	waitBackoff(ctx, sub, r.backoff)
	r.backoff = min(r.backoff*2, fetchBackoffMax)
}

// succeeded ends an outage: it logs that fetches work again, if they
// failed, and resets the backoff.
func (r *fetchRetry) succeeded() {
	r.out.recovered(r.prefix + "fetches work again")
	r.backoff = fetchBackoffMin
}

// fetchTypes returns the types the worker fetches: its own less those this
// node's pusher delivers (a push target set after the worker started: see
// push_types.go). It logs the types it leaves out or takes back.
func (w *workerRun) fetchTypes() []string {
	set := w.e.pushTypes()
	if w.types != nil && set == w.pushSeen {
		return w.types
	}
	for _, typ := range w.cfg.Types {
		switch was, is := w.pushSeen.has(typ), set.has(typ); {
		case is && !was:
			w.e.log.Warn("type has a push target now; the worker no longer fetches it", "worker", w.cfg.ID, "type", typ)
		case was && !is:
			w.e.log.Info("push target removed; the worker fetches the type again", "worker", w.cfg.ID, "type", typ)
		}
	}
	w.pushSeen, w.types = set, set.without(w.cfg.Types)
	return w.types
}

// fetch leases up to limit tasks. The call does not end when ctx does:
// cancelled after the store committed, it would lose the leases it took
// (their tasks would wait for the reaper, an attempt counted). It is bounded
// by the lease duration instead, after which what it leased has expired
// anyway.
func (w *workerRun) fetch(ctx context.Context, limit int) ([]store.Task, error) {
	e := w.e
	if !e.clockReady() {
		return nil, nil // nothing leased on a clock not yet synced
	}
	types := w.fetchTypes()
	if len(types) == 0 {
		return nil, nil // every type has a push target now
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.LeaseDuration)
	defer cancel()
	return e.st.FetchTasks(fctx, store.FetchParams{
		Types: types, Limit: limit, WorkerID: w.cfg.ID,
		// No byte bound: an in-process worker holds its tasks' payloads
		// for its handlers anyway, and its fetches are bounded in count
		// (FetchBatch, the free capacity); the bounded statement costs
		// SQLite a window over the batch on the path of bulk throughput.
		LeaseDuration: e.cfg.LeaseDuration, Now: e.now(),
	})
}

// leavePushed gives back the tasks of a fetch whose type gained a push
// target while the fetch ran (its types were read before it was sent), so
// that the engine delivers them, and returns the others. A fetch that met
// no change of the push set costs one atomic load.
func (w *workerRun) leavePushed(tasks []store.Task) []store.Task {
	set := w.e.pushTypes()
	if set == w.pushSeen || len(tasks) == 0 {
		return tasks
	}
	kept, back := set.split(tasks)
	if len(back) > 0 {
		w.e.log.Info("fetched tasks of a type that gained a push target meanwhile; released for delivery",
			"worker", w.cfg.ID, "tasks", len(back), "type", back[0].Type)
		w.releaseFetched(back)
	}
	return kept
}

// releaseFetched gives back the tasks of a fetch that returned after the
// worker began to stop.
func (w *workerRun) releaseFetched(tasks []store.Task) {
	if len(tasks) == 0 {
		return
	}
	ts := make([]*store.Task, len(tasks))
	for i := range tasks {
		ts[i] = &tasks[i]
	}
	w.release(ts)
}

// waitBackoff waits d after a failed fetch, or less when a wake-up comes
// (sub): then until min(d, fetchRetryFloor) has passed.
func waitBackoff(ctx context.Context, sub <-chan struct{}, d time.Duration) {
	floor := time.Now().Add(min(d, fetchRetryFloor))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return
	case <-ctx.Done():
		return
	case <-sub:
	}
	if left := time.Until(floor); left > 0 {
		sleepCtx(ctx, left)
	}
}
