package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

// contractMoreTests pin further promises of store.Store's doc comments and
// docs/storage.md: insert conflicts that carry idempotency keys, the
// history's default outcome kind, a cancel's traces, and the optional
// wake-up and cancellation channels.
var contractMoreTests = []testCase{
	{"Insert/ExistingIDWithKey", testInsertExistingIDWithKey},
	{"Outcome/EmptyKind", testOutcomeEmptyKind},
	{"Cancel/RunningLeavesNoHistory", testCancelRunningNoHistory},
	{"Notify/Channels", testNotifyChannels},
}

// testInsertExistingIDWithKey: an id that already exists fails the whole
// batch with ErrConflict even when the task carries an idempotency key
// no task holds (a backend resolving keys with ON CONFLICT must not let
// the id's conflict pass as a duplicate); a task whose key is taken is
// that key's duplicate, whatever its id.
func testInsertExistingIDWithKey(e *env) {
	e.insert(base, nt("t_1", "a"))
	e.insert(base, keyed("t_2", "k2"))
	for _, batch := range [][]store.NewTask{
		{nt("t_new", "a"), keyed("t_1", "k-new")},
		{keyed("t_new", "k-other"), keyed("t_2", "k-new")},
	} {
		_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base.Add(time.Second), Tasks: batch})
		e.isErr(fmt.Sprintf("InsertTasks of the existing id %s under a new key", batch[1].ID), err, store.ErrConflict)
		e.notFound("t_new")
	}
	res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base.Add(time.Second), Tasks: []store.NewTask{keyed("t_1", "k2")}})
	e.noErr("InsertTasks of an existing id under another task's key", err)
	e.eq("duplicate", res[0].Duplicate, true)
	e.eq("the key's task", res[0].Task.ID, "t_2")
	e.eq("t_1's key", e.get("t_1", store.StatePending).IdempotencyKey, "")
	e.eq("pending", e.counts()[store.StatePending], 2)
}

// testOutcomeEmptyKind: an outcome without an OutcomeKind records its
// attempt as succeeded for a success and failed otherwise, and Stats
// counts the failures.
func testOutcomeEmptyKind(e *env) {
	now := base.Add(time.Second)
	ok := succeed(e.start(base, nt("t_ok", "ok")))
	retry := failRetry(e.start(base, nt("t_retry", "retry")), now.Add(time.Hour), "E")
	dead := kill(e.start(base, nt("t_dead", "dead")), "E", store.DeadMaxAttempts)
	for _, o := range []store.Outcome{ok, retry, dead} {
		o.OutcomeKind = ""
		e.mustRecord(now, o)
	}
	for id, want := range map[string]string{"t_ok": store.OutcomeSucceeded, "t_retry": store.OutcomeFailed, "t_dead": store.OutcomeFailed} {
		as := e.attempts(id)
		e.eq("attempts of "+id, len(as), 1)
		e.eq("outcome of "+id, as[0].Outcome, want)
	}
	st, err := e.s.Stats(e.ctx, store.StatsParams{})
	e.noErr("Stats", err)
	failures := map[string]int{}
	for _, ts := range st {
		failures[ts.Type] = ts.Failures
	}
	e.eq("failures", failures, map[string]int{"ok": 0, "retry": 1, "dead": 1})
}

// testCancelRunningNoHistory: cancelling a running task records no
// attempt, and the worker's later outcome and heartbeat under its lease
// are ErrLeaseLost and change nothing.
func testCancelRunningNoHistory(e *env) {
	t := e.start(base, nt("t_1", "a"))
	now := base.Add(time.Second)
	_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: t.ID, Now: now})
	e.noErr("CancelTask", err)
	cancelled := e.get(t.ID, store.StateCancelled)
	e.eq("history after the cancel", len(e.attempts(t.ID)), 0)
	e.isErr("outcome under the cancelled lease", e.record(now, succeed(t)), store.ErrLeaseLost)
	errs, err := e.s.ExtendLeases(e.ctx, store.ExtendParams{Now: now, Leases: []store.LeaseRef{
		{TaskID: t.ID, LeaseID: t.LeaseID, ExpiresAt: now.Add(time.Hour)}}})
	e.noErr("ExtendLeases", err)
	e.isErr("heartbeat under the cancelled lease", errs[0], store.ErrLeaseLost)
	e.sameTask("task after the late calls", e.get(t.ID, ""), cancelled)
	e.eq("history after the late calls", len(e.attempts(t.ID)), 0)
}

// notifyWait bounds how long testNotifyChannels waits for a channel.
const notifyWait = 10 * time.Second

// testNotifyChannels: a store.Notifier's wake-up channel is closed when
// its context is done; a store.CancelNotifier's cancellation channel
// receives the task and lease of a running task cancelled while the
// wake-up listener runs (an id holding spaces included) and is closed when
// its context is done or the store closes (one asked for after Close comes
// closed). Delivery is best effort, but a fresh store with its listener
// running delivers.
func testNotifyChannels(e *env) {
	n, ok := e.s.(store.Notifier)
	if !ok {
		e.t.Skip("the store does not implement store.Notifier")
	}
	closed := func(what string, ch <-chan struct{}) {
		e.t.Helper()
		deadline := time.After(notifyWait)
		for {
			select {
			case _, open := <-ch:
				if !open {
					return
				}
			case <-deadline:
				e.t.Fatalf("%s: still open after %v", what, notifyWait)
			}
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	w := n.Wakeups(ctx)
	cancel()
	closed("wake-ups after their context was cancelled", w)

	cn, ok := e.s.(store.CancelNotifier)
	if !ok {
		return
	}
	lctx, stopListener := context.WithCancel(e.ctx)
	defer stopListener()
	w = n.Wakeups(lctx)
	cctx, cancelCancels := context.WithCancel(e.ctx)
	defer cancelCancels()
	cancels := cn.Cancellations(cctx)
	gone := cn.Cancellations(e.ctx) // closed by the store's Close

	// A first wake-up shows the listener runs: a backend may send one when
	// it connects, and an insert notifies.
	deadline := time.After(notifyWait)
	for i := 0; ; i++ {
		e.insert(base, nt(fmt.Sprintf("wake_%d", i), "wake"))
		select {
		case <-w:
		case <-time.After(50 * time.Millisecond):
			continue
		case <-deadline:
			e.t.Fatalf("no wake-up in %v", notifyWait)
		}
		break
	}
	t := e.start(base, nt("t 1 with spaces", "cancelled"))
	_, err := e.s.CancelTask(e.ctx, store.CancelParams{ID: t.ID, Now: base.Add(time.Second)})
	e.noErr("CancelTask", err)
	select {
	case ref := <-cancels:
		e.eq("cancellation", ref, store.LeaseRef{TaskID: t.ID, LeaseID: t.LeaseID})
	case <-time.After(notifyWait):
		e.t.Fatalf("the cancellation of the running task %q did not arrive in %v", t.ID, notifyWait)
	}
	cancelCancels()
	closedRefs(e, "cancellations after their context was cancelled", cancels)

	e.noErr("Close", e.s.Close())
	closedRefs(e, "cancellations after the store closed", gone)
	closedRefs(e, "cancellations asked for after Close", cn.Cancellations(e.ctx))
}

// closedRefs waits until ch is closed, reading what is left in it.
func closedRefs(e *env, what string, ch <-chan store.LeaseRef) {
	e.t.Helper()
	deadline := time.After(notifyWait)
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-deadline:
			e.t.Fatalf("%s: still open after %v", what, notifyWait)
		}
	}
}
