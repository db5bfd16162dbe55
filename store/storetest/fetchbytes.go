package storetest

import (
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

var fetchBytesTests = []testCase{
	{"Fetch/MaxBytes", testFetchMaxBytes},
	{"Fetch/MaxBytesInvalid", testFetchMaxBytesInvalid},
}

// testFetchMaxBytes: a fetch with MaxBytes leases tasks in fetch order and
// stops before the one whose payload would take it past the bound, but
// leases at least one; the tasks past the cut stay pending, untouched, and
// later fetches lease every task exactly once.
func testFetchMaxBytes(e *env) {
	// ntypes is the fetch's type filters: none, one, or two types whose
	// tasks alternate in fetch order.
	for k, c := range []struct{ limit, maxBytes, ntypes int }{{100, 1000, 1}, {4, 2500, 1}, {100, 1, 1}, {100, 2000, 0}, {7, 1500, 2}} {
		what := fmt.Sprintf("limit %d, %d bytes, %d types", c.limit, c.maxBytes, c.ntypes)
		typ := func(i int) string {
			if c.ntypes == 2 {
				return fmt.Sprint("a", k, "_", i%2)
			}
			return fmt.Sprint("a", k)
		}
		var types []string
		for i := range c.ntypes {
			types = append(types, typ(i))
		}
		var want []store.Task
		for i, size := range payloadSizes {
			n := sizedTask(fmt.Sprintf("t_%d_%02d", k, i), typ(i), size)
			n.RunAt = base.Add(-time.Duration(len(payloadSizes)-i) * time.Second) // fetch order is insert order
			want = append(want, e.insert(base, n)[0].Task)
		}
		at := 0
		for fetches := 0; at < len(want); fetches++ {
			if fetches > len(want) {
				e.t.Fatalf("%s: fetching does not end", what)
			}
			fit := 0
			for bytes := 0; at+fit < len(want) && fit < c.limit; fit++ {
				bytes += len(want[at+fit].Payload)
				if fit > 0 && bytes > c.maxBytes {
					break
				}
			}
			got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: types, Limit: c.limit, WorkerID: worker,
				LeaseDuration: leaseDur, Now: base, MaxBytes: c.maxBytes})
			e.noErr(what+": fetch", err)
			if len(got) != fit {
				e.t.Fatalf("%s: fetch %d leased %d tasks (%d payload bytes), want %d from %s", what, fetches, len(got), pageBytes(got), fit, want[at].ID)
			}
			for i, tk := range got {
				e.eq(what+": leased task", tk.ID, want[at+i].ID)
				e.eq(what+": leased payload", string(tk.Payload), string(want[at+i].Payload))
				e.eq(what+": leased state", tk.State, store.StateRunning)
			}
			at += len(got)
			// Every task past the cut is still pending, untouched.
			for _, w := range want[at:] {
				left := e.get(w.ID, store.StatePending)
				e.eq(what+": attempt of a task past the cut", left.Attempt, w.Attempt)
				e.eqTime(what+": update time of a task past the cut", left.UpdatedAt, w.UpdatedAt)
			}
		}
		e.eqIDs(what+": fetch after all", e.fetch(base, 10, types...))
	}
}

// testFetchMaxBytesInvalid: a negative MaxBytes is ErrInvalid and leases
// nothing.
func testFetchMaxBytesInvalid(e *env) {
	e.insert(base, sizedTask("t_a", "a", 10))
	_, err := e.s.FetchTasks(e.ctx, store.FetchParams{Limit: 1, WorkerID: worker, LeaseDuration: leaseDur, Now: base, MaxBytes: -1})
	e.isErr("negative MaxBytes", err, store.ErrInvalid)
	e.get("t_a", store.StatePending)
}
