package storetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var insertTests = []testCase{
	{"Insert/Single", testInsertSingle},
	{"Insert/ScheduledVsPending", testInsertScheduled},
	{"Insert/LargeBatch", testInsertLargeBatch},
	{"Insert/Empty", testInsertEmpty},
	{"Insert/Invalid", testInsertInvalid},
	{"Insert/BatchIsAtomic", testInsertAtomic},
	{"Insert/IdempotencyExisting", testIdemExisting},
	{"Insert/IdempotencyWithinBatch", testIdemBatch},
	{"Insert/IdempotencyConcurrent", testIdemConcurrent},
	{"Insert/IdempotencyCrossedOrders", testIdemCrossedOrders},
	{"Insert/IdempotencyDeadRedrivenPurged", testIdemDeadRedrivenPurged},
	{"Insert/IdempotencyResent", testIdemResent},
	{"Insert/Leased", testInsertLeased},
	{"Insert/ConcurrentFailureIsolated", testInsertConcurrentIsolated},
	{"Insert/LongKeys", testInsertLongKeys},
}

// noise returns n bytes of text no compression shortens (PostgreSQL
// compresses long index entries before it checks their size), different
// for each seed.
func noise(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('!' + r.IntN(94))
	}
	return string(b)
}

// testInsertLongKeys: ids, types and idempotency keys (and the names of
// types, nodes and leadership leases) up to store.MaxKeyBytes long are
// stored and used like short ones by every backend; a byte more is
// ErrInvalid everywhere, rather than refused by one backend's index alone.
func testInsertLongKeys(e *env) {
	const max = store.MaxKeyBytes
	long := store.NewTask{ID: noise(1, max), Type: noise(2, max), IdempotencyKey: noise(3, max)}
	res := e.insert(base, long)
	e.eq("inserted", res[0].Duplicate, false)
	dup := long
	dup.ID = noise(4, max)
	e.eq("a duplicate of the long key", e.insert(base, dup)[0].Task.ID, long.ID)
	t := e.lease(base, long.ID, long.Type)
	e.mustRecord(base.Add(time.Second), kill(t, noise(5, 200), store.DeadMaxAttempts))
	dead := e.listDead(store.DeadFilter{Type: long.Type, Limit: 10})
	e.eqIDs("dead tasks of the long type", dead, long.ID)
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: []string{long.ID}, Now: base.Add(time.Minute)})
	e.noErr("RedriveDead", err)
	e.eq("redriven", n, 1)
	e.get(long.ID, store.StatePending)

	for _, c := range []struct {
		what string
		task store.NewTask
	}{
		{"an id longer", store.NewTask{ID: noise(6, max+1), Type: "a"}},
		{"a type longer", store.NewTask{ID: "t_type", Type: noise(7, max+1)}},
		{"an idempotency key longer", store.NewTask{ID: "t_key", Type: "a", IdempotencyKey: noise(8, max+1)}},
		// Beyond what a PostgreSQL index entry holds.
		{"a far longer id", store.NewTask{ID: noise(11, 3000), Type: "a"}},
		{"a far longer idempotency key", store.NewTask{ID: "t_key", Type: "a", IdempotencyKey: noise(12, 3000)}},
	} {
		_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_ok", "a"), c.task}})
		e.isErr("InsertTasks with "+c.what+" than MaxKeyBytes", err, store.ErrInvalid)
		e.notFound("t_ok")
	}

	for _, name := range []string{noise(9, max), noise(10, max+1)} {
		check := func(what string, err error) {
			e.t.Helper()
			what = fmt.Sprintf("%s of %d bytes", what, len(name))
			if len(name) <= max {
				e.noErr(what, err)
			} else {
				e.isErr(what, err, store.ErrInvalid)
			}
		}
		_, err := e.s.PutType(e.ctx, store.TypeConfig{Type: name}, base)
		check("PutType of a name", err)
		check("HeartbeatNode of an id", e.s.HeartbeatNode(e.ctx, store.Node{ID: name, Role: "worker"}, base))
		_, err = e.s.AcquireLeader(e.ctx, store.LeaderParams{Name: name, NodeID: "n1", TTL: time.Minute, Now: base})
		check("AcquireLeader of a name", err)
	}
	types, err := e.s.ListTypes(e.ctx)
	e.noErr("ListTypes", err)
	e.eq("types stored", len(types), 1)
}

// testInsertConcurrentIsolated runs concurrent InsertTasks calls of which
// every third names an existing id: those fail as a whole (nothing of them
// is inserted) and the others are unaffected, however the backend groups
// concurrent writes.
func testInsertConcurrentIsolated(e *env) {
	e.insert(base, nt("taken", "a"))
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tasks := []store.NewTask{nt(fmt.Sprintf("c_%02d", i), "a")}
			if i%3 == 0 {
				tasks = append(tasks, nt("taken", "a"))
			}
			_, errs[i] = e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: tasks})
		})
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("c_%02d", i)
		if i%3 == 0 {
			if errs[i] == nil {
				e.t.Fatalf("InsertTasks %d with an existing id succeeded", i)
			}
			e.notFound(id)
			continue
		}
		e.noErr(fmt.Sprintf("InsertTasks %d", i), errs[i])
		e.get(id, store.StatePending)
	}
	e.eq("pending", e.counts()[store.StatePending], 1+n-n/3)
}

// testInsertLeased covers direct dispatch: a due task inserted with a lease
// starts running under it; scheduled tasks and duplicates ignore the lease.
func testInsertLeased(e *env) {
	lease := func(id string) *store.NewLease {
		return &store.NewLease{LeaseID: "direct-" + id, WorkerID: "w-direct", Duration: 30 * time.Second}
	}
	due, later, dup := nt("t_due", "a"), nt("t_later", "a"), nt("t_dup", "a")
	due.Lease, later.Lease = lease("due"), lease("later")
	later.RunAt = base.Add(time.Minute)
	e.insert(base, nt("t_keyed", "a"))
	keyed := nt("t_k1", "a")
	keyed.IdempotencyKey = "k"
	e.insert(base, keyed)
	dup.IdempotencyKey, dup.Lease = "k", lease("dup")
	res := e.insert(base, due, later, dup)
	e.eq("due state", res[0].Task.State, store.StateRunning)
	e.eq("due attempt", res[0].Task.Attempt, 1)
	e.eq("due lease", res[0].Task.LeaseID, "direct-due")
	e.eq("due worker", res[0].Task.WorkerID, "w-direct")
	e.eqTime("due lease expiry", res[0].Task.LeaseExpiresAt, base.Add(30*time.Second))
	got := e.get("t_due", store.StateRunning)
	e.eq("stored lease", got.LeaseID, "direct-due")
	e.eq("stored attempt", got.Attempt, 1)
	e.eqTime("stored started", got.StartedAt, base)
	e.eq("scheduled ignores the lease", res[1].Task.State, store.StateScheduled)
	e.eq("scheduled lease id", e.get("t_later", store.StateScheduled).LeaseID, "")
	e.eq("duplicate", res[2].Duplicate, true)
	e.eq("duplicate keeps the existing task", e.get("t_k1", store.StatePending).LeaseID, "")
	// The leased task is not fetched again, it shows in lease expiry, and its
	// outcome applies under the direct lease with a complete history row.
	exp, err := e.s.ExpiredLeases(e.ctx, store.ExpiredParams{Limit: 10, Now: base.Add(time.Minute)})
	e.noErr("expired leases", err)
	e.eqIDs("expired", exp, "t_due")
	e.eqIDs("fetch", e.fetch(base, 10), "t_k1", "t_keyed")
	e.mustRecord(base.Add(time.Second), succeed(got))
	hist := e.attempts("t_due")
	e.eq("history rows", len(hist), 1)
	e.eq("history worker", hist[0].WorkerID, "w-direct")
	e.eqTime("history started", hist[0].StartedAt, base)
	e.eq("history number", hist[0].Number, 1)
}

func testInsertSingle(e *env) {
	n := store.NewTask{ID: "t_001", Type: "email", Payload: json.RawMessage(`{"to":"a@b.c","n":[1,2,3],"s":"\u00e9"}`),
		Priority: 5, MaxAttempts: 7, IdempotencyKey: "key-1"}
	res := e.insert(base, n)
	want := store.Task{ID: "t_001", Type: "email", Payload: n.Payload, Priority: 5, EffectivePrio: 5,
		State: store.StatePending, MaxAttempts: 7, IdempotencyKey: "key-1", RunAt: base, CreatedAt: base, UpdatedAt: base}
	e.eq("Duplicate", res[0].Duplicate, false)
	e.sameTask("insert result", res[0].Task, want)
	e.sameTask("GetTask", e.get("t_001", ""), want)
	e.eq("attempts of a new task", len(e.attempts("t_001")), 0)

	// No payload, no key, no priority.
	e.insert(base, store.NewTask{ID: "t_002", Type: "email"})
	got := e.get("t_002", store.StatePending)
	if len(got.Payload) != 0 && string(got.Payload) != "null" {
		e.t.Fatalf("empty payload read back as %q", got.Payload)
	}
	e.eq("IdempotencyKey", got.IdempotencyKey, "")
}

func testInsertScheduled(e *env) {
	past, now, future := nt("t_past", "a"), nt("t_now", "a"), nt("t_future", "a")
	past.RunAt, now.RunAt, future.RunAt = base.Add(-time.Second), base, base.Add(time.Second)
	res := e.insert(base, past, now, future, nt("t_zero", "a"))
	for i, want := range []store.State{store.StatePending, store.StatePending, store.StateScheduled, store.StatePending} {
		e.eq("state of result "+res[i].Task.ID, res[i].Task.State, want)
		e.get(res[i].Task.ID, want)
	}
	e.eqTime("RunAt of past task", e.get("t_past", "").RunAt, base.Add(-time.Second))
	e.eqTime("RunAt of future task", e.get("t_future", "").RunAt, base.Add(time.Second))
	e.eqTime("zero RunAt defaults to Now", e.get("t_zero", "").RunAt, base)
	// Scheduled tasks are not fetched before they are promoted.
	e.eqIDs("fetch", e.fetch(base, 10), "t_past", "t_now", "t_zero")
}

func testInsertLargeBatch(e *env) {
	const n = 5000
	batch := make([]store.NewTask, n)
	for i := range batch {
		batch[i] = nt(fmt.Sprintf("t_%05d", i), "bulk")
		if i%10 == 0 {
			batch[i].RunAt = base.Add(time.Minute)
		}
		if i%7 == 0 {
			batch[i].IdempotencyKey = fmt.Sprintf("k-%d", i)
		}
	}
	res := e.insert(base, batch...)
	for i, r := range res {
		if r.Task.ID != batch[i].ID || r.Duplicate {
			e.t.Fatalf("result %d: %s duplicate=%v, want %s", i, r.Task.ID, r.Duplicate, batch[i].ID)
		}
	}
	c := e.counts()
	e.eq("scheduled", c[store.StateScheduled], n/10)
	e.eq("pending", c[store.StatePending], n-n/10)
	e.get("t_04999", store.StatePending)
	e.get("t_04990", store.StateScheduled)
}

func testInsertEmpty(e *env) {
	res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base})
	e.noErr("InsertTasks(empty)", err)
	e.eq("results", len(res), 0)
	// A zero Now is refused by every backend, even with nothing to insert.
	_, err = e.s.InsertTasks(e.ctx, store.InsertParams{})
	e.isErr("InsertTasks(empty) with a zero Now", err, store.ErrInvalid)
}

func testInsertInvalid(e *env) {
	_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_1", "a"), {Type: "a"}}})
	e.isErr("InsertTasks with an empty id", err, store.ErrInvalid)
	e.notFound("t_1")

	// Every other kind of bad input is refused as a whole, the same way by
	// every backend (store.CheckNewTasks), and leaves nothing behind.
	leased := func(id, lease string, d time.Duration) store.NewTask {
		n := nt(id, "a")
		n.Lease = &store.NewLease{LeaseID: lease, WorkerID: "w", Duration: d}
		return n
	}
	keyed := func(id, key string) store.NewTask {
		n := nt(id, "a")
		n.IdempotencyKey = key
		return n
	}
	for _, c := range []struct {
		what string
		bad  store.NewTask
	}{
		{"a lease without a lease id", leased("t_2", "", time.Minute)},
		{"a lease of no duration", leased("t_2", "L", 0)},
		{"an id that is not UTF-8", nt("t_\xff", "a")},
		{"a type with a NUL byte", nt("t_2", "a\x00b")},
		{"an idempotency key that is not UTF-8", keyed("t_2", "k\xfe")},
		{"an id twice", nt("t_1", "a")},
		{"a priority beyond 32 bits", func() store.NewTask { n := nt("t_2", "a"); n.Priority = 1 << 31; return n }()},
		{"max attempts beyond 32 bits", func() store.NewTask { n := nt("t_2", "a"); n.MaxAttempts = -1<<31 - 1; return n }()},
		{"a lease id with a NUL byte", leased("t_2", "L\x00", time.Minute)},
		{"a worker id that is not UTF-8", func() store.NewTask { n := leased("t_2", "L", time.Minute); n.Lease.WorkerID = "w\xff"; return n }()},
	} {
		_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_1", "a"), c.bad}})
		e.isErr("InsertTasks with "+c.what, err, store.ErrInvalid)
		e.notFound("t_1")
	}
	// The same id under the same idempotency key is a duplicate, not a
	// second row.
	res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{keyed("t_k", "k"), keyed("t_k", "k")}})
	e.noErr("InsertTasks of a key twice", err)
	e.eq("second is a duplicate", res[1].Duplicate, true)
	e.eq("of the first", res[1].Task.ID, "t_k")

	// A fetch naming too many types is refused; a list naming states many
	// times is not.
	types := make([]string, store.MaxFetchTypes+1)
	for i := range types {
		types[i] = fmt.Sprintf("type_%03d", i)
	}
	_, err = e.s.FetchTasks(e.ctx, store.FetchParams{Types: types, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: base})
	e.isErr("FetchTasks of too many types", err, store.ErrInvalid)
	states := make([]store.State, 40_000)
	for i := range states {
		states[i] = store.States[i%len(store.States)]
	}
	ts, _, err := e.s.ListTasks(e.ctx, store.ListParams{States: states, Limit: 10})
	e.noErr("ListTasks naming states many times", err)
	e.eq("listed", len(ts), 1)
}

func testInsertAtomic(e *env) {
	e.insert(base, nt("t_1", "a"))
	_, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{nt("t_2", "a"), nt("t_1", "a")}})
	e.isErr("InsertTasks with an existing id", err, store.ErrConflict)
	e.notFound("t_2") // the whole batch was rolled back
	e.eq("pending", e.counts()[store.StatePending], 1)
}

func testIdemExisting(e *env) {
	first := nt("t_1", "a")
	first.IdempotencyKey = "order-42"
	e.insert(base, first)
	orig := e.lease(base, "t_1", "a") // the duplicate returns the task as it stands

	second := nt("t_2", "a")
	second.IdempotencyKey = "order-42"
	res := e.insert(base.Add(time.Second), second, nt("t_3", "a"))
	e.eq("Duplicate", res[0].Duplicate, true)
	e.sameTask("duplicate result", res[0].Task, orig)
	e.eq("Duplicate of a task without key", res[1].Duplicate, false)
	e.notFound("t_2")
	e.get("t_3", store.StatePending)

	// Keys are unique regardless of type and state.
	e.mustRecord(base.Add(time.Second), succeed(orig))
	third := nt("t_4", "b")
	third.IdempotencyKey = "order-42"
	res = e.insert(base.Add(2*time.Second), third)
	e.eq("Duplicate after success", res[0].Duplicate, true)
	e.eq("duplicate id", res[0].Task.ID, "t_1")
	e.eq("duplicate state", res[0].Task.State, store.StateSucceeded)
}

func testIdemBatch(e *env) {
	mk := func(id, key string) store.NewTask {
		n := nt(id, "a")
		n.IdempotencyKey = key
		return n
	}
	res := e.insert(base, mk("t_1", "k1"), mk("t_2", "k1"), mk("t_3", ""), mk("t_4", "k2"), mk("t_5", "k2"), mk("t_6", "k1"))
	wantID := []string{"t_1", "t_1", "t_3", "t_4", "t_4", "t_1"}
	wantDup := []bool{false, true, false, false, true, true}
	for i, r := range res {
		if r.Task.ID != wantID[i] || r.Duplicate != wantDup[i] {
			e.t.Fatalf("result %d: (%s, %v), want (%s, %v)", i, r.Task.ID, r.Duplicate, wantID[i], wantDup[i])
		}
	}
	e.eq("IdempotencyKey of in-batch duplicate", res[1].Task.IdempotencyKey, "k1")
	for _, id := range []string{"t_2", "t_5", "t_6"} {
		e.notFound(id)
	}
	e.eq("pending", e.counts()[store.StatePending], 3)
}

func testIdemConcurrent(e *env) {
	const n = 16
	var wg sync.WaitGroup
	results := make([]store.InsertResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			task := nt(fmt.Sprintf("t_%02d", i), "a")
			task.IdempotencyKey = "same"
			res, err := e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: []store.NewTask{task, nt(fmt.Sprintf("u_%02d", i), "a")}})
			errs[i] = err
			if err == nil {
				results[i] = res[0]
			}
		})
	}
	wg.Wait()
	created, winner := 0, ""
	for i := range n {
		e.noErr("concurrent InsertTasks", errs[i])
		if !results[i].Duplicate {
			created++
			winner = results[i].Task.ID
		}
	}
	e.eq("non-duplicate results", created, 1)
	for i := range n {
		e.eq("id of result", results[i].Task.ID, winner)
	}
	e.eq("pending tasks", e.counts()[store.StatePending], 1+n)
}

// testIdemCrossedOrders runs pairs of concurrent batches that carry the
// same idempotency keys in opposite orders (two nodes coalescing the same
// producers' retries in different orders). Both must succeed: each key
// yields one task, the other batch's entries are duplicates of it. A
// backend that inserts keyed rows in input order can deadlock here.
func testIdemCrossedOrders(e *env) {
	const keys = 100
	for round := range 10 {
		var a, b []store.NewTask
		for i := range keys {
			a = append(a, keyed(fmt.Sprintf("a%d_%03d", round, i), fmt.Sprintf("k%d_%03d", round, i)))
			j := keys - 1 - i
			b = append(b, keyed(fmt.Sprintf("b%d_%03d", round, j), fmt.Sprintf("k%d_%03d", round, j)))
		}
		var wg sync.WaitGroup
		var ra, rb []store.InsertResult
		var ea, eb error
		wg.Go(func() { ra, ea = e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: a}) })
		wg.Go(func() { rb, eb = e.s.InsertTasks(e.ctx, store.InsertParams{Now: base, Tasks: b}) })
		wg.Wait()
		e.noErr(fmt.Sprintf("round %d: first batch", round), ea)
		e.noErr(fmt.Sprintf("round %d: second batch (keys in the opposite order)", round), eb)
		for i := range keys {
			x, y := ra[i], rb[keys-1-i]
			if x.Task.ID != y.Task.ID || x.Duplicate == y.Duplicate {
				e.t.Fatalf("round %d, key %d: results %s (duplicate %v) and %s (duplicate %v), want one task and one duplicate of it",
					round, i, x.Task.ID, x.Duplicate, y.Task.ID, y.Duplicate)
			}
		}
	}
	e.eq("pending tasks", e.counts()[store.StatePending], 10*keys)
}

// testIdemDeadRedrivenPurged: a dead task's key holds while it is dead and
// after a redrive (the same task, pending again, is the duplicate's
// answer, as stored); purging the dead task frees the key.
func testIdemDeadRedrivenPurged(e *env) {
	e.makeState(base, keyed("t_dead", "k-dead"), store.StateDead)
	res := e.insert(base.Add(time.Second), keyed("t_again", "k-dead"))
	e.eq("duplicate of a dead task", res[0].Duplicate, true)
	e.sameTask("duplicate of a dead task", res[0].Task, e.get("t_dead", store.StateDead))
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: []string{"t_dead"}, Now: base.Add(2 * time.Second)})
	e.noErr("RedriveDead", err)
	e.eq("redriven", n, 1)
	res = e.insert(base.Add(3*time.Second), keyed("t_again", "k-dead"))
	e.eq("duplicate of a redriven task", res[0].Duplicate, true)
	e.sameTask("duplicate of a redriven task", res[0].Task, e.get("t_dead", store.StatePending))
	e.notFound("t_again")
	purged := nt("t_dead2", "b") // another type: t_dead is pending in "a"
	purged.IdempotencyKey = "k-purged"
	e.makeState(base.Add(4*time.Second), purged, store.StateDead)
	n, err = e.s.PurgeDead(e.ctx, store.DeadFilter{IDs: []string{"t_dead2"}})
	e.noErr("PurgeDead", err)
	e.eq("purged", n, 1)
	res = e.insert(base.Add(5*time.Second), keyed("t_new", "k-purged"))
	e.eq("duplicate after a purge", res[0].Duplicate, false)
	e.eq("new task after a purge", res[0].Task.ID, "t_new")
	e.get("t_new", store.StatePending)
}

// testIdemResent: an insert sent again as it was (same id, same key) is a
// duplicate of the task it stored, not a conflicting id, alone or in a
// batch, on every backend.
func testIdemResent(e *env) {
	e.insert(base, keyed("t_1", "k1"))
	res := e.insert(base.Add(time.Second), keyed("t_1", "k1"))
	e.eq("resent insert is a duplicate", res[0].Duplicate, true)
	e.eq("resent insert's task", res[0].Task.ID, "t_1")
	res = e.insert(base.Add(time.Second), keyed("t_2", "k2"), keyed("t_1", "k1"))
	e.eq("resent insert in a batch is a duplicate", res[1].Duplicate, true)
	e.get("t_2", store.StatePending)
	e.eq("pending", e.counts()[store.StatePending], 2)
}

// keyed is a new task of type "a" with an idempotency key.
func keyed(id, key string) store.NewTask {
	t := nt(id, "a")
	t.IdempotencyKey = key
	return t
}
