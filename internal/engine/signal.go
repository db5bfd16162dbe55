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
// Plain subscribers (in-process workers, push loops: a few per node) are
// all woken by each broadcast. Pull requests waiting in a long poll (up to
// MaxLongPolls per node) join a group per set of types instead, and a
// broadcast wakes one waiter per group: waking every waiter would make
// each of them query the store for what one of them will get. A waiter
// whose fetch leased tasks passes the wake-up on to two more of its group
// (pass), since more may be due; one whose fetch found nothing ends the
// chain. A waiter that leaves holding a wake-up it did not act on hands it
// on (leaveGroup).
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	groups map[string][]chan struct{} // waiters by type set, longest waiting first
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[chan struct{}]struct{}), groups: make(map[string][]chan struct{})}
}

func (b *broadcaster) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch
}

func (b *broadcaster) unsubscribe(ch chan struct{}) {
	b.mu.Lock()
	delete(b.subs, ch)
	b.mu.Unlock()
}

// joinGroup subscribes a waiter to the group key (its set of types, see
// typeSetKey), last in line.
func (b *broadcaster) joinGroup(key string) chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.groups[key] = append(b.groups[key], ch)
	b.mu.Unlock()
	return ch
}

// leaveGroup unsubscribes ch from the group key. A wake-up ch holds and
// did not act on goes to the next waiter of the group, so that leaving
// (a deadline, a caller gone, a lease answered) never swallows one.
func (b *broadcaster) leaveGroup(key string, ch chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[key]
	for i, c := range g {
		if c == ch {
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
	case <-ch:
		b.wakeLocked(g, nil, 1)
	default:
	}
}

// pass wakes n waiters of the group key other than ch: ch's fetch leased
// tasks, so more may be due.
func (b *broadcaster) pass(key string, ch chan struct{}, n int) {
	b.mu.Lock()
	b.wakeLocked(b.groups[key], ch, n)
	b.mu.Unlock()
}

// wakeLocked wakes the first n waiters of g other than skip; a waiter
// already holding a wake-up counts as woken, since it will fetch. b.mu is
// held.
func (b *broadcaster) wakeLocked(g []chan struct{}, skip chan struct{}, n int) {
	for _, c := range g {
		if n == 0 {
			return
		}
		if c == skip {
			continue
		}
		select {
		case c <- struct{}{}:
		default:
		}
		n--
	}
}

func (b *broadcaster) broadcast() {
	b.mu.Lock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for _, g := range b.groups {
		b.wakeLocked(g, nil, 1)
	}
	b.mu.Unlock()
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
