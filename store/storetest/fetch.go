package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var fetchTests = []testCase{
	{"Fetch/Ordering", testFetchOrdering},
	{"Fetch/EffectivePriority", testFetchEffectivePrio},
	{"Fetch/TypeFilter", testFetchTypes},
	{"Fetch/PriorityAcrossTypes", testFetchPriorityAcrossTypes},
	{"Fetch/PromotedRetryKeepsItsPriority", testFetchPromotedRetryKeepsItsPriority},
	{"Fetch/Lease", testFetchLease},
	{"Fetch/Invalid", testFetchInvalid},
	{"Fetch/TypesCountedOnce", testFetchTypesCountedOnce},
	{"Fetch/Concurrent", testFetchConcurrent},
}

func testFetchOrdering(e *env) {
	mk := func(id string, prio int, runAt time.Duration) store.NewTask {
		n := nt(id, "a")
		n.Priority, n.RunAt = prio, base.Add(runAt)
		return n
	}
	e.insert(base,
		mk("t_a", 0, -10*time.Second),
		mk("t_b", 5, -time.Second),
		mk("t_e", 5, -5*time.Second),
		mk("t_c", 5, -5*time.Second),
		mk("t_d", 10, 0),
		mk("t_f", 100, time.Second), // scheduled: not fetchable
	)
	// Returned in dispatch order: EffectivePrio desc, RunAt asc, id asc.
	e.eqIDs("first fetch", e.fetch(base, 2), "t_d", "t_c")
	e.eqIDs("second fetch", e.fetch(base, 10), "t_e", "t_b", "t_a")
	e.eqIDs("third fetch", e.fetch(base, 10))
}

func testFetchEffectivePrio(e *env) {
	x := nt("t_x", "a")
	x.Priority = 5
	tx := e.start(base, x)
	// Sinks to EffectivePrio 1; due immediately, so stored pending.
	o := failRetry(tx, base, "E")
	o.EffectivePrio = 1
	e.mustRecord(base, o)
	got := e.get("t_x", store.StatePending)
	e.eq("Priority", got.Priority, 5)
	e.eq("EffectivePrio", got.EffectivePrio, 1)
	y := nt("t_y", "a")
	y.Priority = 3
	e.insert(base.Add(time.Second), y)
	e.eqIDs("fetch", e.fetch(base.Add(time.Second), 10), "t_y", "t_x")
}

func testFetchTypes(e *env) {
	for _, typ := range []string{"a", "b", "c"} {
		for i := range 3 {
			e.insert(base, nt(fmt.Sprintf("t_%s%d", typ, i), typ))
		}
	}
	e.eqIDs("fetch a", e.fetch(base, 10, "a"), "t_a0", "t_a1", "t_a2")
	e.eqIDs("fetch b,c", e.fetch(base, 4, "c", "b"), "t_b0", "t_b1", "t_b2", "t_c0")
	e.eqIDs("fetch unknown type", e.fetch(base, 10, "nope"))
	e.eqIDs("fetch a again", e.fetch(base, 10, "a"))
	e.eqIDs("fetch all", e.fetch(base, 10), "t_c1", "t_c2")
}

func testFetchLease(e *env) {
	for i := range 5 {
		e.insert(base, nt(fmt.Sprintf("t_%d", i), "a"))
	}
	now := base.Add(time.Second)
	got := e.fetch(now, 3)
	e.eq("fetched", len(got), 3)
	leases := map[string]bool{}
	for _, t := range got {
		e.eq("State", t.State, store.StateRunning)
		e.eq("Attempt", t.Attempt, 1)
		e.eq("WorkerID", t.WorkerID, worker)
		e.eqTime("StartedAt", t.StartedAt, now)
		e.eqTime("UpdatedAt", t.UpdatedAt, now)
		e.eqTime("LeaseExpiresAt", t.LeaseExpiresAt, now.Add(leaseDur))
		if t.LeaseID == "" || leases[t.LeaseID] {
			e.t.Fatalf("lease id %q empty or reused", t.LeaseID)
		}
		leases[t.LeaseID] = true
		e.sameTask("GetTask of a running task", e.get(t.ID, ""), t)
	}
	e.eq("second fetch", len(e.fetch(now, 10)), 2)
	e.eq("third fetch", len(e.fetch(now, 10)), 0)

	// A released task is leased again under a fresh lease id; the released
	// attempt is not counted.
	e.mustRecord(now, store.Outcome{TaskID: got[0].ID, LeaseID: got[0].LeaseID, State: store.StatePending})
	again := e.lease(now.Add(time.Second), got[0].ID, "a")
	if leases[again.LeaseID] {
		e.t.Fatalf("lease id %q granted twice", again.LeaseID)
	}
	e.eq("Attempt after release and refetch", again.Attempt, 1)
}

func testFetchInvalid(e *env) {
	_, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 0, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
	e.isErr("FetchTasks(Limit 0)", err, store.ErrInvalid)
}

func testFetchConcurrent(e *env) {
	const n, workers = 2000, 8
	batch := make([]store.NewTask, n)
	for i := range batch {
		batch[i] = nt(fmt.Sprintf("t_%05d", i), "a")
	}
	e.insert(base, batch...)
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		leases = map[string]bool{}
		wg     sync.WaitGroup
		errs   = make([]error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for {
				ts, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 25, WorkerID: fmt.Sprint("w", w), LeaseDuration: leaseDur, Now: base})
				if err != nil {
					errs[w] = err
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, t := range ts {
					seen[t.ID]++
					if leases[t.LeaseID] {
						errs[w] = fmt.Errorf("lease id %s granted twice", t.LeaseID)
					}
					leases[t.LeaseID] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		e.noErr("concurrent fetch", err)
	}
	e.eq("distinct tasks fetched", len(seen), n)
	for id, c := range seen {
		if c != 1 {
			e.t.Fatalf("task %s fetched %d times", id, c)
		}
	}
	e.eq("running", e.counts()[store.StateRunning], n)
}

// testFetchTypesCountedOnce: the bound on the types of a fetch
// (store.MaxFetchTypes) counts distinct types: one type named many times
// is one type.
func testFetchTypesCountedOnce(e *env) {
	e.insert(base, nt("t_1", "a"), nt("t_2", "b"))
	types := make([]string, store.MaxFetchTypes+1)
	for i := range types {
		types[i] = "b"
	}
	got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: types, Limit: 5, WorkerID: worker, LeaseDuration: leaseDur, Now: base})
	e.noErr("FetchTasks naming one type many times", err)
	e.eq("fetched", ids(got), []string{"t_2"})
}

// testFetchPriorityAcrossTypes: a fetch over several types hands out its
// tasks in one dispatch order across them (EffectivePrio, then RunAt, then
// id), not type by type nor in turns: while a higher-priority type has
// pending work, a fetch takes none of a lower one's, however old.
func testFetchPriorityAcrossTypes(e *env) {
	mk := func(id, typ string, prio int, runAt time.Duration) store.NewTask {
		n := nt(id, typ)
		n.Priority, n.RunAt = prio, base.Add(runAt)
		return n
	}
	e.insert(base,
		mk("t_low_old", "low", 0, -time.Hour),
		mk("t_high_1", "high", 5, -time.Second),
		mk("t_high_2", "high", 5, 0),
		mk("t_mid", "mid", 3, -time.Minute),
		mk("t_other", "other", 9, -time.Hour), // not asked for
	)
	e.eqIDs("first fetch", e.fetch(base, 2, "low", "high", "mid"), "t_high_1", "t_high_2")
	e.eqIDs("second fetch", e.fetch(base, 1, "mid", "low"), "t_mid")
	e.eqIDs("third fetch", e.fetch(base, 5, "high", "low", "mid"), "t_low_old")
	e.get("t_other", store.StatePending)
}

// testFetchPromotedRetryKeepsItsPriority: a retry keeps the EffectivePrio
// its failure gave it through retry_waiting and promotion, and is then
// fetched by it (Priority, the task's own, plays no part), after fresh work
// of a higher ordering priority whatever the due times.
func testFetchPromotedRetryKeepsItsPriority(e *env) {
	r := nt("t_retry", "a")
	r.Priority = 5
	tr := e.start(base, r)
	o := failRetry(tr, base.Add(10*time.Second), "E")
	o.EffectivePrio = 2
	e.mustRecord(base, o)
	fresh := nt("t_fresh", "b")
	fresh.Priority = 3
	e.insert(base.Add(20*time.Second), fresh)
	low := nt("t_low", "a")
	low.Priority = 1
	e.insert(base.Add(time.Second), low)
	now := base.Add(30 * time.Second)
	n, err := e.s.PromoteDue(e.ctx, store.PromoteParams{Limit: 10, Now: now})
	e.noErr("PromoteDue", err)
	e.eq("promoted", n, 1)
	got := e.get("t_retry", store.StatePending)
	e.eq("Priority after promotion", got.Priority, 5)
	e.eq("EffectivePrio after promotion", got.EffectivePrio, 2)
	e.eqIDs("fetch", e.fetch(now, 10, "a", "b"), "t_fresh", "t_retry", "t_low")
}
