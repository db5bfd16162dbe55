package store

import "sort"

// SortDispatchOrder sorts tasks into the order FetchTasks hands them out:
// highest EffectivePrio first, then earliest RunAt, then id. Backends lease
// a batch with one statement whose RETURNING order is unspecified and use
// this to restore the dispatch order.
func SortDispatchOrder(ts []Task) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.EffectivePrio != b.EffectivePrio {
			return a.EffectivePrio > b.EffectivePrio
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	})
}
