package postgres

import "time"

// Outcome holding.
//
// A producer that enqueues one task at a time waits for the commit of the
// group carrying its insert, and its next enqueue waits for that. Nobody
// waits on an outcome batch that way: a worker's handler slot is free once
// its outcome is queued, and the task's lease stays valid until the
// outcome commits. So a group that carries inserts leaves the outcome
// batches out and holds them for a later group, until the oldest has been
// held for outcomeHold (or maxHeldWrites are held): then they all ride
// along with the next group. Under a steady stream of enqueues the
// producers' commits carry no outcome statement most of the time, and an
// outcome batch covers several groups' worth of tasks, which the server
// updates for less per row.
//
// The writer never waits while it holds writes: when the next group brings
// no inserts (or nothing at all: the stream ended), the held writes go out
// with it at once.

// outcomeHold bounds how long an outcome batch may be held back.
const outcomeHold = 3 * time.Millisecond

// maxHeldWrites bounds the writes held at once.
const maxHeldWrites = 16

// holder keeps the writes held back from groups with inserts.
type holder struct {
	writes []*groupWrite
	since  time.Time // when the oldest of writes was held
}

// split returns the writes of group to send now and holds the others.
// Held writes are sent first (in the order they came) whenever they are
// released.
func (h *holder) split(group []*groupWrite, now time.Time) []*groupWrite {
	if !hasInserts(group) || (len(h.writes) > 0 && now.Sub(h.since) >= outcomeHold) {
		return h.release(group)
	}
	send := make([]*groupWrite, 0, len(group))
	for _, w := range group {
		if w.ins != nil {
			send = append(send, w)
			continue
		}
		if len(h.writes) == 0 {
			h.since = now
		}
		h.writes = append(h.writes, w)
	}
	if len(h.writes) >= maxHeldWrites {
		return h.release(send)
	}
	return send
}

// release returns the held writes followed by group, and holds nothing.
func (h *holder) release(group []*groupWrite) []*groupWrite {
	if len(h.writes) == 0 {
		return group
	}
	out := append(h.writes, group...)
	h.writes = nil
	return out
}

// held reports whether any write is held.
func (h *holder) held() bool { return len(h.writes) > 0 }
