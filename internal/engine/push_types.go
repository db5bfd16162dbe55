package engine

import "github.com/retryq/retryq/store"

// A type whose push target is set while workers serve it (through the HTTP
// API or the CLI, on this node or another) is delivered by the engine from
// then on: in-process workers stop fetching it, enqueues stop handing its
// tasks to them, long polls stop leasing it, and later lease requests and
// RunWorker calls naming it are refused. A node learns of the change when
// its pusher reads the stored types (at once after a PutType on this node,
// else within pushRefreshInterval); a worker's fetch or a lease request in
// flight then, whose types were read before, gives back what it leased of
// the type (leavePushed, Lease). Removing the target hands the type back
// to the workers that still name it. Refusing the target instead could only
// account for this node's workers, not for those of other nodes nor for
// pull workers between two requests.

// pushSet is the set of types a pusher delivers (it has a fetcher for
// each). It is immutable: a change replaces it, so a holder can tell a
// change by comparing pointers.
type pushSet struct {
	types map[string]bool
}

// has reports whether the set (nil: empty) holds typ.
func (s *pushSet) has(typ string) bool {
	return s != nil && s.types[typ]
}

// without returns types less those in the set: types itself when it holds
// none of them.
func (s *pushSet) without(types []string) []string {
	if s == nil || len(s.types) == 0 {
		return types
	}
	var out []string
	for i, typ := range types {
		if !s.types[typ] {
			if out != nil {
				out = append(out, typ)
			}
			continue
		}
		if out == nil {
			out = append(make([]string, 0, len(types)), types[:i]...)
		}
	}
	if out == nil {
		return types
	}
	return out
}

// split returns, in their order, the tasks whose type the set (nil:
// empty) does not hold and, apart, those whose type it holds. kept shares
// tasks' array.
func (s *pushSet) split(tasks []store.Task) (kept, pushed []store.Task) {
	kept = tasks[:0]
	for i := range tasks {
		if s.has(tasks[i].Type) {
			pushed = append(pushed, tasks[i])
		} else {
			kept = append(kept, tasks[i])
		}
	}
	return kept, pushed
}

// pushTypes returns the types this node's pusher delivers now (nil before
// its first read of the types).
func (e *Engine) pushTypes() *pushSet {
	if e.push == nil {
		return nil
	}
	return e.push.delivered.Load()
}

// updateDelivered records the types p has fetchers for, if they changed.
// When a type left the set, fetchers are woken: workers that name it
// fetch it again, and its tasks may be pending. p.mu is held.
func (p *pusher) updateDelivered() {
	old := p.delivered.Load()
	same := old != nil && len(old.types) == len(p.fetchers)
	for typ := range p.fetchers {
		if !same {
			break
		}
		same = old.types[typ]
	}
	if same {
		return
	}
	set := &pushSet{types: make(map[string]bool, len(p.fetchers))}
	for typ := range p.fetchers {
		set.types[typ] = true
	}
	p.delivered.Store(set)
	if old != nil {
		for typ := range old.types {
			if !set.types[typ] {
				p.e.wake.broadcast()
				return
			}
		}
	}
}
