package store

import "time"

// Outcome holding, for group-committing backends.
//
// A producer that enqueues one task at a time waits for the commit of the
// group carrying its insert, and its next enqueue waits for that. Nobody
// waits on an outcome batch that way: a worker's handler slot is free once
// its outcome is queued, and the task's lease stays valid until the
// outcome commits. So a group that carries inserts leaves the outcome
// batches out and holds them for a later group, until the oldest has been
// held for OutcomeHold (or MaxHeldWrites are held): then they all ride
// along, first, with the next group. Under a steady stream of enqueues
// most producer commits then carry no outcome statement, and one outcome
// batch covers several groups' worth of tasks.
//
// A writer must never wait while it holds writes: when the next group
// brings no inserts (or nothing at all: the stream ended), the held writes
// go out with it at once. The effect on readers is that a finished task
// may show running up to OutcomeHold longer.

// OutcomeHold bounds how long an outcome write may be held back.
const OutcomeHold = 3 * time.Millisecond

// MaxHeldWrites bounds the writes held at once.
const MaxHeldWrites = 16

// Holder keeps the outcome writes held back from groups with inserts. W is
// a backend's queued write. The zero value holds nothing; it is not safe
// for concurrent use (one writer goroutine owns it).
type Holder[W any] struct {
	writes []W
	since  time.Time // when the oldest of writes was held
}

// Split returns the writes of group to send now, holding back those that
// holdable reports when group has a write that insert reports and nothing
// held has waited OutcomeHold yet. Released writes come first, in the
// order they came.
func (h *Holder[W]) Split(group []W, now time.Time, insert, holdable func(W) bool) []W {
	hasInsert := false
	for _, w := range group {
		if insert(w) {
			hasInsert = true
			break
		}
	}
	if !hasInsert || (len(h.writes) > 0 && now.Sub(h.since) >= OutcomeHold) {
		return h.Release(group)
	}
	send := make([]W, 0, len(group))
	for _, w := range group {
		if !holdable(w) {
			send = append(send, w)
			continue
		}
		if len(h.writes) == 0 {
			h.since = now
		}
		h.writes = append(h.writes, w)
	}
	if len(h.writes) >= MaxHeldWrites {
		return h.Release(send)
	}
	return send
}

// Release returns the held writes followed by group, and holds nothing.
func (h *Holder[W]) Release(group []W) []W {
	if len(h.writes) == 0 {
		return group
	}
	held := h.writes
	h.writes = nil
	return append(held, group...)
}

// Held reports whether any write is held.
func (h *Holder[W]) Held() bool { return len(h.writes) > 0 }

// Len returns how many writes are held.
func (h *Holder[W]) Len() int { return len(h.writes) }
