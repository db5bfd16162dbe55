package engine

import (
	"log/slog"
	"time"
)

// postponedReminder is how often the reaper warns again that it still
// postpones the expired leases of a type whose configuration it cannot
// read (one this binary cannot decode stays so until it is rewritten or the
// binary replaced).
const postponedReminder = time.Hour

// postponedLog logs the types whose expired leases the reaper leaves
// because their configuration cannot be read: a warning the first time,
// the passes after it at Debug with a reminder at most once per
// postponedReminder (with how many passes postponed it and for how long),
// and an Info line when the type's configuration reads again, or when a
// complete pass met no expired lease of the type (its tasks went away
// otherwise: a late outcome, a cancel, a purge). Without it, every pass
// (once per poll interval) warned for each such type. It is used by the
// scheduler's goroutine.
type postponedLog struct {
	log   *slog.Logger
	every time.Duration // the reminder interval; 0 is postponedReminder
	types map[string]*postponedType
	// met are the postponed types the current pass met (postponed or
	// readable), since beginPass.
	met map[string]bool
}

// postponedType is the state of one postponed type.
type postponedType struct {
	passes          int // that postponed it
	since, reminded time.Time
}

// postponed logs that the reaper leaves typ's expired leases, its
// configuration failing to read with err.
func (p *postponedLog) postponed(typ string, err error) {
	now := time.Now()
	p.meet(typ)
	pt := p.types[typ]
	every := p.every
	if every <= 0 {
		every = postponedReminder
	}
	switch {
	case pt == nil:
		if p.types == nil {
			p.types = make(map[string]*postponedType)
		}
		p.types[typ] = &postponedType{passes: 1, since: now, reminded: now}
		p.log.Warn("scheduler: reaping postponed: type configuration unavailable", "type", typ, "err", err)
	case now.Sub(pt.reminded) >= every || now.Before(pt.reminded):
		pt.passes++
		pt.reminded = now
		p.log.Warn("scheduler: reaping still postponed: type configuration unavailable", "type", typ,
			"postponed", pt.passes, "for", now.Sub(pt.since).Round(time.Second), "err", err)
	default:
		pt.passes++
		p.log.Debug("scheduler: reaping postponed: type configuration unavailable", "type", typ,
			"postponed", pt.passes, "err", err)
	}
}

// readable notes that typ's configuration reads: if the reaper postponed
// the type, it logs that it reaps it again.
func (p *postponedLog) readable(typ string) {
	pt := p.types[typ]
	if pt == nil {
		return
	}
	p.meet(typ)
	delete(p.types, typ)
	p.log.Info("scheduler: reaping resumed: type configuration readable again", "type", typ,
		"postponed", pt.passes, "after", time.Since(pt.since).Round(time.Millisecond))
}

// meet notes that the current pass met an expired lease of typ.
func (p *postponedLog) meet(typ string) {
	if p.met == nil {
		p.met = make(map[string]bool)
	}
	p.met[typ] = true
}

// beginPass begins a reap pass: no type is met yet.
func (p *postponedLog) beginPass() {
	clear(p.met)
}

// passComplete notes that the pass saw every expired lease: a postponed
// type it did not meet has none left, and leaves the list.
func (p *postponedLog) passComplete() {
	for typ, pt := range p.types {
		if p.met[typ] {
			continue
		}
		delete(p.types, typ)
		p.log.Info("scheduler: reaping no longer postponed: no expired leases of the type left", "type", typ,
			"postponed", pt.passes, "after", time.Since(pt.since).Round(time.Millisecond))
	}
}
