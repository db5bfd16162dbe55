package engine

import (
	"slices"
	"strings"
	"sync"
)

// broadcaster wakes fetchers when tasks may have become due. Each
// subscriber has a one-slot channel, so a signal sent while the subscriber
// is busy is kept until it next waits: no wake-up is lost between a fetch
// and the next wait.
//
// Plain subscribers (in-process workers, push loops) name the types they
// fetch. A wake-up names the types of the tasks that became due when the
// engine knows them (broadcastTypes: an enqueue, a manual retry), and then
// wakes only the subscribers and groups that fetch one of them, so that
// its cost grows with the fetchers of those types, not with every type a
// fetcher waits on (one push loop per type with a target, one long-poll
// group per set of types); other wake-ups (promotions, notifications from
// other processes, a clock ready) wake them all. Pull requests waiting in a long poll (up to
// MaxLongPolls per node) join a group per set of types instead, and a
// broadcast wakes one waiter per group (wakeOneLocked): waking every
// waiter would make each of them query the store for what one of them will
// get. A waiter whose fetch leased tasks passes the wake-up on to two more
// of its group that are not fetching (pass), since more may be due; one
// whose fetch found nothing ends the chain, and so does one whose
// wake-up was for one task alone (broadcastOne: an enqueue or a manual
// retry of one task) when its fetch leased that very task. A waiter that leaves holding a
// wake-up it did not act on hands it on (leaveGroup), as does one whose
// fetch failed (Lease).
//
// A plain subscriber's wake-up remembers, likewise, the tasks it is for
// when each of the wake-ups merged in it was for one task alone, so that a
// worker whose last fetch leased all of them need not fetch again
// (tookWake): see subState.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan struct{}]*subState // plain subscribers
	groups map[string][]*waiter        // waiters by type set (typeSetKey), longest waiting first
}

// subState is what the broadcaster knows of a plain subscriber. b.mu
// guards it.
type subState struct {
	types []string // the types it fetches (nil: every type)
	// ids are the tasks the wake-ups sent since the subscriber last took
	// one (tookWake) were for, when each was for one task alone
	// (broadcastOne) and they were at most maxWakeIDs; any is set when
	// one of them was for any number of tasks, or there were more.
	ids []string
	any bool
}

// maxWakeIDs bounds the task ids a plain subscriber's wake-up remembers:
// past it, the wake-up is for any task.
const maxWakeIDs = 16

// waiter is a pull request waiting in a long poll.
type waiter struct {
	ch chan struct{} // one slot: a wake-up it has yet to act on
	// fetching is set while the waiter fetches, or was woken and is about
	// to: a wake-up passed on need not go to it. b.mu guards it.
	fetching bool
	// one is the id of the task the wake-up the waiter holds is for,
	// when it is for one task alone (broadcastOne); empty when several
	// wake-ups merged or one is for any number of tasks. b.mu guards it.
	one string
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[chan struct{}]*subState), groups: make(map[string][]*waiter)}
}

// subscribe returns a channel woken by the wake-ups of types (any type
// when none are named).
func (b *broadcaster) subscribe(types ...string) chan struct{} {
	ch := make(chan struct{}, 1)
	if len(types) == 0 {
		types = nil
	} else {
		types = slices.Clone(types) // the caller's may change
	}
	b.mu.Lock()
	b.subs[ch] = &subState{types: types}
	b.mu.Unlock()
	return ch
}

// tookWake is called by a plain subscriber that took a wake-up from ch. When
// every wake-up sent to ch since it last took one was for one task alone,
// it returns how many of those tasks held does not report the subscriber
// holding (its last fetch leased them): 0 means the wake-up is stale, since
// it came from the commit that made those tasks due, which that fetch
// followed or shared, and fetching for it would find nothing it was woken
// for. It returns -1 when one of the wake-ups was for any number of tasks,
// or for more than maxWakeIDs, and when a wake-up came in since the
// subscriber took its own (the ids may be that one's).
func (b *broadcaster) tookWake(ch chan struct{}, held func(id string) bool) (named int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.subs[ch]
	if st == nil || len(ch) > 0 {
		return -1
	}
	named = -1
	if !st.any && len(st.ids) > 0 {
		named = 0
		for _, id := range st.ids {
			if !held(id) {
				named++
			}
		}
	}
	st.ids, st.any = st.ids[:0], false
	return named
}

func (b *broadcaster) unsubscribe(ch chan struct{}) {
	b.mu.Lock()
	delete(b.subs, ch)
	b.mu.Unlock()
}

// joinGroup subscribes a waiter to the group key (its set of types, see
// typeSetKey), last in line. The waiter is fetching: its first fetch
// follows.
func (b *broadcaster) joinGroup(key string) *waiter {
	w := &waiter{ch: make(chan struct{}, 1), fetching: true}
	b.mu.Lock()
	b.groups[key] = append(b.groups[key], w)
	b.mu.Unlock()
	return w
}

// requeue gives w back a wake-up it took but could not act on (its fetch
// failed), for leaveGroup to hand on.
func (b *broadcaster) requeue(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
	w.one = ""
}

// took records that w took a wake-up from its channel and fetches for
// it, and returns the id of the one task that wake-up was for, if it was
// for one task alone: when the fetch leases that task, no other is due
// for the wake-up, and it ends there. A wake-up that came in since w took
// its own makes it return "".
func (b *broadcaster) took(w *waiter) (one string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w.fetching = true
	if len(w.ch) > 0 {
		return "" // w.one is the new wake-up's
	}
	one, w.one = w.one, ""
	return one
}

// setFetching records whether w fetches (true: it was woken, or its poll
// interval passed) or waits again (false).
func (b *broadcaster) setFetching(w *waiter, fetching bool) {
	b.mu.Lock()
	w.fetching = fetching
	b.mu.Unlock()
}

// leaveGroup unsubscribes w from the group key. A wake-up w holds and
// did not act on goes to another waiter of the group, so that leaving
// (a deadline, a caller gone, a lease answered) never swallows one.
func (b *broadcaster) leaveGroup(key string, w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[key]
	for i, c := range g {
		if c == w {
			g = append(g[:i:i], g[i+1:]...)
			break
		}
	}
	if len(g) == 0 {
		delete(b.groups, key)
	} else {
		b.groups[key] = g
	}
	select {
	case <-w.ch:
		b.wakeOneLocked(g, w.one)
	default:
	}
}

// pass wakes n waiters of the group key other than w: w's fetch leased
// tasks, so more may be due. Waiters not fetching come first: passed to
// waiters already fetching, the wake-ups of a batch reached one more
// waiter per round instead of twice as many. Waiters fetching come next,
// when there are too few others: a fetch that began before the tasks
// were committed would miss them, and its waiter would wait for the poll
// interval with tasks due.
func (b *broadcaster) pass(key string, w *waiter, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[key]
	for _, busy := range []bool{false, true} {
		for _, c := range g {
			if n == 0 {
				return
			}
			if c == w || (c.fetching && len(c.ch) == 0) != busy {
				continue
			}
			b.wakeLocked(c, "")
			n--
		}
	}
}

// wakeOneLocked makes one waiter of g fetch after now: the longest
// waiting one that is not fetching (or already holds a wake-up), else the
// longest waiting one, whose fetch may have begun before what the wake-up
// is for. one is the id of the task the wake-up is for, when it is for
// one task alone. b.mu is held.
func (b *broadcaster) wakeOneLocked(g []*waiter, one string) {
	for _, c := range g {
		if !c.fetching || len(c.ch) > 0 {
			b.wakeLocked(c, one)
			return
		}
	}
	if len(g) > 0 {
		b.wakeLocked(g[0], one)
	}
}

// wakeLocked gives w a wake-up, unless it holds one already (it will
// fetch), and marks it fetching. one is the id of the task the wake-up
// is for, when it is for one task alone; merged with one w holds already,
// it is not. b.mu is held.
func (b *broadcaster) wakeLocked(w *waiter, one string) {
	select {
	case w.ch <- struct{}{}:
		w.one = one
	default:
		w.one = ""
	}
	w.fetching = true
}

// broadcast wakes every subscriber and one waiter of every group: tasks of
// any type may have become due.
func (b *broadcaster) broadcast() {
	b.broadcastTypes(nil)
}

// broadcastTypes wakes the subscribers and one waiter of each group that
// fetch one of types: tasks of those types became due. Nil types wake all.
func (b *broadcaster) broadcastTypes(types []string) {
	b.broadcastDue(types, "")
}

// broadcastOne is broadcastTypes for one task, id of type typ, that
// became due alone: a waiter woken for it whose fetch leases that task
// passes the wake-up on to no other (took).
func (b *broadcaster) broadcastOne(typ, id string) {
	b.broadcastDue([]string{typ}, id)
}

// broadcastDue is broadcastTypes; one is the id of the task the wake-up
// is for, when it is for one task alone.
func (b *broadcaster) broadcastDue(types []string, one string) {
	b.mu.Lock()
	for ch, st := range b.subs {
		if types != nil && st.types != nil && !namesAny(st.types, types) {
			continue
		}
		switch {
		case st.any:
		case one == "" || len(st.ids) == maxWakeIDs:
			st.ids, st.any = st.ids[:0], true
		default:
			st.ids = append(st.ids, one)
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for key, g := range b.groups {
		if types == nil || keyNamesAny(key, types) {
			b.wakeOneLocked(g, one)
		}
	}
	b.mu.Unlock()
}

// namesAny reports whether of holds one of types.
func namesAny(of, types []string) bool {
	for _, t := range of {
		if slices.Contains(types, t) {
			return true
		}
	}
	return false
}

// keyNamesAny reports whether the type set named by key (typeSetKey) holds
// one of types. A type's name holds no NUL byte, so the key's parts are
// the types.
func keyNamesAny(key string, types []string) bool {
	for rest, more := key, true; more; {
		var typ string
		typ, rest, more = strings.Cut(rest, "\x00")
		if slices.Contains(types, typ) {
			return true
		}
	}
	return false
}

// typeSetKey names the set of types a pull request asks for, whatever
// their order: the group its long poll waits in.
func typeSetKey(types []string) string {
	if len(types) == 1 {
		return types[0]
	}
	sorted := slices.Clone(types)
	slices.Sort(sorted)
	return strings.Join(slices.Compact(sorted), "\x00")
}
