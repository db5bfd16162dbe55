package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// Limits of the pull-worker protocol.
const (
	MaxLeaseWait     = 30 * time.Second
	MaxLeaseDuration = time.Hour
	MaxLeaseBatch    = 100
	defaultPullLease = 30 * time.Second
)

// ErrTooManyLongPolls answers a pull lease request that asked to wait for
// work while Config.MaxLongPolls requests already wait on this node, and
// no task was due: the worker should ask again a little later (the HTTP
// API answers 503 with Retry-After).
var ErrTooManyLongPolls = errors.New("too many pull lease requests are waiting on this node")

// LeaseRequest asks for tasks on behalf of a remote (pull) worker.
type LeaseRequest struct {
	WorkerID      string
	Types         []string
	Max           int           // default 1, at most MaxLeaseBatch
	Wait          time.Duration // long-poll up to this long; 0 = answer at once
	LeaseDuration time.Duration // 0 = the types' timeout, else 30s
}

// LeaseToken is the opaque lease id handed to remote workers: it names the
// task and the store's lease.
func LeaseToken(t *store.Task) string { return t.ID + "." + t.LeaseID }

// ParseLeaseToken splits a token made by LeaseToken. A token that is not
// text (a NUL byte, invalid UTF-8) was not made by LeaseToken either: it is
// refused here rather than sent to the store, which PostgreSQL would answer
// with an encoding error.
func ParseLeaseToken(tok string) (taskID, leaseID string, err error) {
	i := strings.IndexByte(tok, '.')
	if i <= 0 || i == len(tok)-1 || len(tok) > 200 || !store.ValidText(tok) {
		return "", "", fieldErr("lease_id", "is not a lease id issued by this server")
	}
	return tok[:i], tok[i+1:], nil
}

// Lease leases tasks to a remote worker, long-polling up to r.Wait. Once
// the node began to shut down (EndLongPolls, BeginShutdown, Close) it
// leases nothing and answers no tasks at once; tasks a fetch leased as the
// shutdown began are given back, their attempts not counted. The leases
// it hands out count in PullLeasesOut until they are reported.
func (e *Engine) Lease(ctx context.Context, r LeaseRequest) ([]store.Task, error) {
	if r.WorkerID == "" || len(r.WorkerID) > 200 || !store.ValidText(r.WorkerID) {
		return nil, fieldErr("worker_id", "is required: UTF-8 text without NUL bytes, at most 200 bytes")
	}
	if len(r.Types) == 0 || len(r.Types) > store.MaxFetchTypes {
		return nil, fieldErr("types", "must name between 1 and %d types (got %d)", store.MaxFetchTypes, len(r.Types))
	}
	for i, t := range r.Types {
		if err := ValidateType(fmt.Sprintf("types[%d]", i), t); err != nil {
			return nil, err
		}
	}
	if err := e.checkNoPushTargets(ctx, r.Types); err != nil {
		return nil, err
	}
	if r.Max == 0 {
		r.Max = 1
	}
	if r.Max < 0 || r.Max > MaxLeaseBatch {
		return nil, fieldErr("max", "must be between 1 and %d (got %d)", MaxLeaseBatch, r.Max)
	}
	if r.Wait < 0 || r.Wait > MaxLeaseWait {
		return nil, fieldErr("wait_seconds", "must be between 0 and %d", int(MaxLeaseWait.Seconds()))
	}
	if r.LeaseDuration < 0 || r.LeaseDuration > MaxLeaseDuration {
		return nil, fieldErr("lease_seconds", "must be between 0 and %d", int(MaxLeaseDuration.Seconds()))
	}
	if r.LeaseDuration == 0 {
		r.LeaseDuration = e.pullLeaseDefault(ctx, r.Types)
	}
	if e.ShuttingDown() {
		return nil, nil
	}
	overCap := false
	if r.Wait > 0 {
		if e.longPolls.Add(1) > int64(e.cfg.MaxLongPolls) {
			// Over the cap: answer at once, with what is due now.
			e.longPolls.Add(-1)
			overCap, r.Wait = true, 0
		} else {
			defer e.longPolls.Add(-1)
		}
	}
	deadline := time.Now().Add(r.Wait)
	// A waiting request joins the group of its types: a wake-up goes to
	// one waiter of a group, which passes it on if its fetch leased tasks
	// (see broadcaster).
	var w *waiter
	var sub chan struct{} // w's wake-ups; nil (never ready) without a wait
	key := typeSetKey(r.Types)
	if r.Wait > 0 {
		w = e.wake.joinGroup(key)
		sub = w.ch
		defer e.wake.leaveGroup(key, w)
	}
	woken := false // the fetch acts on a wake-up
	wokeFor := ""  // ... for this task alone (broadcastOne), when set
	for {
		// A type that gained a push target during the wait is the
		// engine's to deliver now (push_types.go); the next request
		// naming it is refused.
		pushed := e.pushTypes()
		types := pushed.without(r.Types)
		if len(types) == 0 {
			return nil, nil
		}
		var tasks []store.Task
		var err error
		if e.clockReady() { // nothing leased on a clock not yet synced
			tasks, err = e.fetchForPull(ctx, &r, types)
		}
		if now := e.pushTypes(); err == nil && len(tasks) > 0 && now != pushed {
			// A type gained a push target while the fetch ran: its tasks
			// are the engine's to deliver, given back attempt not counted.
			var back []store.Task
			if tasks, back = now.split(tasks); len(back) > 0 {
				e.releaseUnclaimed(back)
			}
		}
		if err != nil {
			if woken {
				// The wake-up this fetch acted on goes to another waiter
				// of the group (leaveGroup), or the tasks it was for wait
				// for their poll interval.
				e.wake.requeue(w)
			}
			return nil, fmt.Errorf("lease tasks: %w", err)
		}
		if len(tasks) > 0 {
			// Counted before the shutdown check below: a stop that
			// begins after it waits for these leases (AwaitPullReports).
			e.pulled.add(tasks, e.now())
		}
		if len(tasks) > 0 && ctx.Err() != nil {
			// The caller left (a closed connection) while the fetch
			// committed: nobody will run these tasks. Give the leases back
			// now, attempt not counted, rather than leave them to expire
			// and cost an attempt each.
			e.releaseUnclaimed(tasks)
			return nil, fmt.Errorf("lease tasks: %w", ctx.Err())
		}
		if len(tasks) > 0 && e.ShuttingDown() {
			// The node began to shut down while the fetch committed: the
			// worker could run the tasks but, once the drain ends, perhaps
			// report to no one (on one node), and each would wait for the
			// reaper and cost an attempt. Give them back instead.
			e.releaseUnclaimed(tasks)
			return nil, nil
		}
		if len(tasks) > 0 || r.Wait == 0 {
			if w != nil && fetchMayHaveMore(tasks, r.Max) && !(woken && leasedTask(tasks, wokeFor)) {
				// More may be due. A fetch that came back short took
				// every task due: the others' fetches would find none;
				// and one that leased the task its wake-up was for
				// alone leaves none for them either. (One that leased
				// another task, due by another path, passes it on: the
				// task it was woken for may still wait.)
				e.wake.pass(key, w, 2)
			}
			for i := range tasks {
				if e.debugging() {
					e.log.Debug("task leased", "task_id", tasks[i].ID, "type", tasks[i].Type, "attempt", tasks[i].Attempt, "worker", r.WorkerID)
				}
			}
			if len(tasks) == 0 && overCap {
				return nil, fmt.Errorf("lease tasks: %w (at most %d)", ErrTooManyLongPolls, e.cfg.MaxLongPolls)
			}
			return tasks, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		e.wake.setFetching(w, false)
		// A wait that ends at the deadline answers without a last fetch:
		// the worker's next request, sent at once, begins with one.
		last := left <= e.cfg.PollInterval
		t := time.NewTimer(min(left, e.cfg.PollInterval))
		select {
		case <-sub:
			woken = true
			wokeFor = e.wake.took(w)
		case <-t.C:
			if last {
				return nil, nil // a wake-up w holds now goes to another waiter (leaveGroup)
			}
			woken, wokeFor = false, ""
			e.wake.setFetching(w, true)
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-e.pollsEnded: // shutting down
			t.Stop()
			return nil, nil
		}
		t.Stop()
	}
}

// ShuttingDown reports whether the node began to shut down
// (EndLongPolls, BeginShutdown or Close was called): it leases no more
// tasks to pull workers.
func (e *Engine) ShuttingDown() bool {
	select {
	case <-e.pollsEnded:
		return true
	default:
		return false
	}
}

// fetchForPull leases due tasks of types for r. The fetch does not end
// when ctx does: cut after the store committed (a driver answering a
// cancel that came with the commit), it would leave the tasks leased
// under lease ids nobody was told, until they expire. It is bounded instead by the lease
// duration, after which what it leased has expired anyway, but never
// below the bound of an in-process worker's fetch (Config.LeaseDuration):
// a lease of a microsecond must not cut the fetch that takes it.
func (e *Engine) fetchForPull(ctx context.Context, r *LeaseRequest, types []string) ([]store.Task, error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.LeaseDuration, e.cfg.LeaseDuration))
	defer cancel()
	return e.st.FetchTasks(fctx, store.FetchParams{Types: types, Limit: r.Max, WorkerID: r.WorkerID,
		LeaseDuration: r.LeaseDuration, Now: e.now(), MaxBytes: DefaultFetchBytes})
}

// ReleaseLeased gives back the leases of tasks Lease handed out whose
// answer did not reach the worker (the HTTP API's client left before it
// was written, or its write failed): the tasks are pending again at once,
// their attempts not counted and their priorities unchanged, and the
// lease ids handed out are no longer valid (Complete, Fail and Heartbeat
// with one are ErrLeaseLost). It returns once the releases are committed
// (or refused: a lease that was already gone).
func (e *Engine) ReleaseLeased(tasks []store.Task) {
	<-e.releaseUnclaimed(tasks)
}

// releaseUnclaimed puts tasks leased for a caller that is gone back to
// pending, their attempts not counted, without waiting for the commit:
// the channel it returns is closed once every release is settled.
func (e *Engine) releaseUnclaimed(tasks []store.Task) <-chan struct{} {
	settled := make(chan struct{})
	e.pulled.dropTasks(tasks)
	var left sync.WaitGroup
	left.Add(len(tasks))
	for i := range tasks {
		t := &tasks[i]
		out := store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending}
		e.outcomes.submit(out, func(_ struct{}, err error) {
			e.logOutcome(t, &out, err)
			left.Done()
		})
	}
	go func() {
		left.Wait()
		close(settled)
	}()
	return settled
}

// pullLeaseDefault is the lease of a pull request or heartbeat without
// lease_seconds: the longest timeout among the stored configurations of
// types, capped at MaxLeaseDuration (a remote worker that vanishes must not
// hold a task for a day-long timeout; a longer attempt heartbeats), else
// defaultPullLease.
func (e *Engine) pullLeaseDefault(ctx context.Context, types []string) time.Duration {
	var longest time.Duration
	for _, typ := range types {
		if ent, err := e.types.get(ctx, typ); err == nil && ent.spec.Stored && ent.spec.Timeout > longest {
			longest = ent.spec.Timeout
		}
	}
	if longest > 0 {
		return min(longest, MaxLeaseDuration)
	}
	return defaultPullLease
}

// Heartbeat extends a remote worker's lease to now + d and returns the new
// expiry. Without d (0) the lease is extended by the default a lease of
// the task's type gets (pullLeaseDefault), and never shortened: a worker
// that leased for the type's five-minute timeout and heartbeats without
// lease_seconds keeps at least five minutes, not 30 seconds.
func (e *Engine) Heartbeat(ctx context.Context, token string, d time.Duration) (time.Time, error) {
	taskID, leaseID, err := ParseLeaseToken(token)
	if err != nil {
		return time.Time{}, err
	}
	if d < 0 || d > MaxLeaseDuration {
		return time.Time{}, fieldErr("lease_seconds", "must be between 0 and %d", int(MaxLeaseDuration.Seconds()))
	}
	var keep time.Time // the current expiry, kept when later
	if d == 0 {
		t, err := e.Get(ctx, taskID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return time.Time{}, fmt.Errorf("heartbeat lease: %w", err)
		}
		d = defaultPullLease
		if err == nil {
			d = e.pullLeaseDefault(ctx, []string{t.Type})
			if t.LeaseID == leaseID {
				keep = t.LeaseExpiresAt
			}
		}
	}
	now := e.now()
	exp := storedTime(now.Add(d))
	if keep.After(exp) {
		exp = keep
	}
	errs, err := e.st.ExtendLeases(ctx, store.ExtendParams{Leases: []store.LeaseRef{{TaskID: taskID, LeaseID: leaseID, ExpiresAt: exp}}, Now: now})
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat lease: %w", err)
	}
	if len(errs) > 0 && errs[0] != nil {
		if errors.Is(errs[0], store.ErrLeaseLost) {
			e.pulled.drop(taskID, leaseID)
		}
		return time.Time{}, fmt.Errorf("heartbeat lease: %w", errs[0])
	}
	e.pulled.extended(taskID, leaseID, exp)
	return exp, nil
}

// leasedTask loads a task and checks that the token's lease is current; a
// lease that is not is counted in LeaseLost.
func (e *Engine) leasedTask(ctx context.Context, id, token string) (store.Task, error) {
	taskID, leaseID, err := ParseLeaseToken(token)
	if err != nil {
		return store.Task{}, err
	}
	if taskID != id {
		return store.Task{}, fmt.Errorf("lease %s is for another task: %w", token, store.ErrLeaseLost)
	}
	t, err := e.Get(ctx, id)
	if err != nil {
		return store.Task{}, err
	}
	// A lease is current up to and including its expiry instant, as in
	// the store (docs/storage.md).
	if t.State != store.StateRunning || t.LeaseID != leaseID || e.now().After(t.LeaseExpiresAt) {
		// A report not sent because its lease is gone counts in
		// LeaseLost, as one the store refuses does (commitOutcomes).
		e.ctr.leaseLost.Add(1)
		e.pulled.drop(id, leaseID)
		return store.Task{}, fmt.Errorf("task %s (state %s): %w", id, t.State, store.ErrLeaseLost)
	}
	return t, nil
}

// Complete records the success of a remotely run attempt.
func (e *Engine) Complete(ctx context.Context, id, token string) error {
	t, err := e.leasedTask(ctx, id, token)
	if err != nil {
		return err
	}
	out := store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
	if err := e.recordPull(ctx, &t, out); err != nil {
		return fmt.Errorf("complete task %s: %w", id, err)
	}
	return nil
}

// Fail records the failure of a remotely run attempt and returns the
// engine's decision: retry_waiting with its run time, pending (with its run
// time) when that time has already come, or dead.
func (e *Engine) Fail(ctx context.Context, id, token string, rep ReportedError) (store.Outcome, error) {
	if rep.Message == "" {
		return store.Outcome{}, fieldErr("error.message", "is required")
	}
	if len(rep.Code) > 200 {
		return store.Outcome{}, fieldErr("error.code", "is longer than 200 bytes")
	}
	if rep.RetryAfter < 0 {
		return store.Outcome{}, fieldErr("error.retry_after_seconds", "must not be negative")
	}
	t, err := e.leasedTask(ctx, id, token)
	if err != nil {
		return store.Outcome{}, err
	}
	spec, err := e.decidingSpec(ctx, t.Type)
	if err != nil {
		if ctx.Err() != nil {
			return store.Outcome{}, fmt.Errorf("fail task %s: %w", id, err)
		}
		// Not decided under the defaults: the task is held back, the
		// attempt not counted, and the answer says when it runs again.
		out := e.holdBack(&t, err)
		out.RunAt = storedTime(out.RunAt)
		if err := e.recordPull(ctx, &t, out); err != nil {
			return store.Outcome{}, fmt.Errorf("fail task %s: %w", id, err)
		}
		return store.Outcome{TaskID: out.TaskID, LeaseID: out.LeaseID, State: store.StateRetryWaiting, RunAt: out.RunAt,
			LastDelay: unreadableTypeDelay}, nil
	}
	out := e.Decide(&t, &spec, rep.failure(), e.now())
	out.RunAt = storedTime(out.RunAt)
	if err := e.recordPull(ctx, &t, out); err != nil {
		return store.Outcome{}, fmt.Errorf("fail task %s: %w", id, err)
	}
	if out.State == store.StateRetryWaiting && !out.RunAt.After(e.now()) {
		// Due by now: the store kept it pending (a retry time not after
		// the commit's), or the promoter has made it so since.
		out.State = store.StatePending
	}
	return out, nil
}

// recordPull records the outcome of a pull worker's attempt and, once it
// is taken or refused as lost, forgets the lease (PullLeasesOut).
func (e *Engine) recordPull(ctx context.Context, t *store.Task, out store.Outcome) error {
	err := e.record(ctx, t, out)
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		e.pulled.drop(t.ID, t.LeaseID)
	}
	return err
}

// storedTime is t as the stores keep it, to the microsecond (see
// docs/storage.md), for answers that report a time just written: the
// caller then sees the time it reads back later, not one up to a
// microsecond later.
func storedTime(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// leasedTask reports whether tasks hold the task id (never, for "").
func leasedTask(tasks []store.Task, id string) bool {
	if id == "" {
		return false
	}
	for i := range tasks {
		if tasks[i].ID == id {
			return true
		}
	}
	return false
}
