package store

import (
	"context"
	"slices"
	"sync"
)

// TypedNotifier is implemented by Notifiers whose notifications may name
// the task types that became due, so that a process wakes only the
// fetchers of those types rather than every fetcher it runs (with many
// types, each woken fetcher of another type queries the database for
// nothing).
type TypedNotifier interface {
	Notifier
	// TypedWakeups is Wakeups plus the record of what its values are for:
	// after receiving a value, the receiver calls Take on the returned
	// DueTypes. A value whose Take finds nothing recorded stands for
	// notifications an earlier Take already returned.
	TypedWakeups(ctx context.Context) (<-chan struct{}, *DueTypes)
}

// MaxDueTypes bounds the distinct types a DueTypes keeps between two calls
// of Take; past it, it records any type.
const MaxDueTypes = 64

// DueTypes collects the task types named by notifications between two
// calls of Take. The zero value is ready to use; it is safe for concurrent
// use.
type DueTypes struct {
	mu    sync.Mutex
	types []string
	all   bool
}

// Add records a notification for types; none (nil or empty) stands for
// any type.
func (d *DueTypes) Add(types []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.all {
		return
	}
	if len(types) == 0 {
		d.all, d.types = true, nil
		return
	}
	for _, t := range types {
		if slices.Contains(d.types, t) {
			continue
		}
		if len(d.types) == MaxDueTypes {
			d.all, d.types = true, nil
			return
		}
		d.types = append(d.types, t)
	}
}

// Take returns the types recorded since the last Take and clears the
// record. all reports that some notification named no type (or that the
// types passed MaxDueTypes); types is then nil.
func (d *DueTypes) Take() (types []string, all bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	types, all = d.types, d.all
	d.types, d.all = nil, false
	return types, all
}
