package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var fetchTypesTests = []testCase{
	{"Fetch/OrderAcrossManyTypes", testFetchOrderAcrossManyTypes},
	{"Fetch/ConcurrentOverlappingTypes", testFetchConcurrentOverlappingTypes},
}

// testFetchOrderAcrossManyTypes: fetches of up to store.MaxFetchTypes
// types, and fetches without types, lease in one dispatch order across the
// types (EffectivePrio, then RunAt, then id), whatever the limit against
// the number of types, with ties of priority and due time between types
// decided by id, and types with nothing pending among those asked for.
func testFetchOrderAcrossManyTypes(e *env) {
	const ntypes, n = store.MaxFetchTypes, 3 * store.MaxFetchTypes
	types := make([]string, ntypes)
	for i := range types {
		types[i] = fmt.Sprintf("ty%03d", i)
	}
	batch := make([]store.NewTask, n)
	for i := range batch {
		// Tasks go to the even-numbered types only (the others, asked
		// for too, have nothing pending), ids run across the types,
		// priorities and due times repeat.
		b := nt(fmt.Sprintf("t_%03d", (i*37)%n), types[(i*7)%(ntypes/2)*2])
		b.Priority = i % 3
		b.RunAt = base.Add(-time.Duration(i%5) * time.Second)
		batch[i] = b
	}
	e.insert(base, batch...)
	slices.SortFunc(batch, func(a, b store.NewTask) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	at := 0
	for k, c := range []struct {
		limit int
		typed bool
	}{{1, true}, {1, false}, {3, true}, {ntypes - 1, true}, {5, false}, {ntypes + 10, false}, {2 * ntypes, true}, {n, true}} {
		var asked []string
		if c.typed {
			asked = types
		}
		var want []string
		for _, b := range batch[at:min(at+c.limit, n)] {
			want = append(want, b.ID)
		}
		e.eqIDs(fmt.Sprintf("fetch %d (limit %d, typed %v)", k, c.limit, c.typed), e.fetch(base, c.limit, asked...), want...)
		at += len(want)
	}
	e.eq("running", e.counts()[store.StateRunning], n)
}

// testFetchConcurrentOverlappingTypes: fetchers of overlapping sets of
// types, named in different orders, fetching a backlog at once never lease
// a task twice, never deadlock, and between them lease every task.
func testFetchConcurrentOverlappingTypes(e *env) {
	const ntypes, n, fetchers = 6, 1200, 6
	batch := make([]store.NewTask, n)
	for i := range batch {
		batch[i] = nt(fmt.Sprintf("t_%05d", i), fmt.Sprint("ty", i%ntypes))
		batch[i].Priority = i % 4
	}
	e.insert(base, batch...)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make([]error, fetchers)
	)
	for f := range fetchers {
		// Fetcher f asks for three types from its own, the first of them
		// last: each pair of fetchers shares some types.
		asked := []string{fmt.Sprint("ty", (f+1)%ntypes), fmt.Sprint("ty", (f+2)%ntypes), fmt.Sprint("ty", f)}
		wg.Go(func() {
			for {
				ts, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: asked, Limit: 7, WorkerID: fmt.Sprint("w", f),
					LeaseDuration: leaseDur, Now: base})
				if err != nil {
					errs[f] = err
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, t := range ts {
					seen[t.ID]++
					if !slices.Contains(asked, t.Type) {
						errs[f] = fmt.Errorf("fetch of %v leased a task of type %s", asked, t.Type)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		e.noErr("concurrent fetch", err)
	}
	for id, c := range seen {
		if c != 1 {
			e.t.Fatalf("task %s fetched %d times", id, c)
		}
	}
	// A fetcher stops at its first empty fetch, which rows locked by
	// another's fetch may cause; whoever locked them fetches again, so
	// the backlog is leased in the end.
	e.eq("distinct tasks fetched", len(seen), n)
	e.eq("running", e.counts()[store.StateRunning], n)
}
