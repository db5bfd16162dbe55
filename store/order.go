package store

import (
	"slices"
	"sort"
	"time"
)

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

// DispatchKey is a task's place in the order FetchTasks hands tasks out:
// its EffectivePrio (a new task's Priority), its RunAt, its id.
type DispatchKey struct {
	Prio  int
	RunAt time.Time
	ID    string
}

// Before reports whether k is handed out before o.
func (k DispatchKey) Before(o DispatchKey) bool {
	if k.Prio != o.Prio {
		return k.Prio > o.Prio
	}
	if !k.RunAt.Equal(o.RunAt) {
		return k.RunAt.Before(o.RunAt)
	}
	return k.ID < o.ID
}

// Heads holds, by type, the first pending task of the type in dispatch
// order: what a lease at insert (NewLease.Types) must not overtake.
type Heads map[string]DispatchKey

// add records a pending task of typ at k.
func (h Heads) add(typ string, k DispatchKey) {
	if cur, ok := h[typ]; !ok || k.Before(cur) {
		h[typ] = k
	}
}

// ahead reports whether a pending task of one of types comes before k.
func (h Heads) ahead(types []string, k DispatchKey) bool {
	for _, typ := range types {
		if cur, ok := h[typ]; ok && cur.Before(k) {
			return true
		}
	}
	return false
}

// LeaseTypes returns the distinct types the leases of ts name in
// NewLease.Types, whose heads a backend reads before the insert (nil when
// no lease names any).
func LeaseTypes(ts []NewTask) []string {
	var types []string
	for i := range ts {
		if l := ts[i].Lease; l != nil {
			types = append(types, l.Types...)
		}
	}
	if types == nil {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(types)))
}

// KeepLeases reports, for each task of ts inserted at now, whether it is
// inserted leased (NewTask.Lease): it is due, asks for a lease, and no
// pending task of its lease's Types comes before it in dispatch order,
// neither one of h nor a task of ts inserted pending (a repeat of an
// earlier task's idempotency key is that task's duplicate, not inserted).
// It then adds the tasks of ts inserted pending to h, for a later insert
// of the same transaction.
func (h Heads) KeepLeases(ts []NewTask, now time.Time) []bool {
	keep := make([]bool, len(ts))
	due := make([]int, 0, len(ts))
	keys := make([]DispatchKey, len(ts))
	var seen map[string]bool
	for i := range ts {
		if k := ts[i].IdempotencyKey; k != "" {
			if seen[k] {
				continue // the earlier task's duplicate: not inserted
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[k] = true
		}
		runAt := ts[i].RunAt
		if runAt.IsZero() {
			runAt = now
		}
		if runAt.After(now) {
			continue // scheduled: never leased, and not pending
		}
		// Stored times have microseconds.
		keys[i] = DispatchKey{Prio: ts[i].Priority, RunAt: time.UnixMicro(runAt.UnixMicro()), ID: ts[i].ID}
		due = append(due, i)
	}
	slices.SortStableFunc(due, func(a, b int) int {
		switch {
		case keys[a].Before(keys[b]):
			return -1
		case keys[b].Before(keys[a]):
			return 1
		}
		return 0
	})
	for _, i := range due {
		if l := ts[i].Lease; l != nil && !h.ahead(l.Types, keys[i]) {
			keep[i] = true
			continue
		}
		h.add(ts[i].Type, keys[i])
	}
	return keep
}
