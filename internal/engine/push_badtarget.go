package engine

import (
	"log/slog"
	"time"
)

// pushBadTargetReminder is how often the pusher warns again about a stored
// push target it cannot use while the target stays stored.
const pushBadTargetReminder = time.Hour

// badTargetLog logs the stored push targets the pusher cannot use
// (undecodable, or failing Target.Validate): a warning when a reload first
// meets one, the reloads after it at Debug with a reminder at most once
// per every (with how many reloads met it and for how long), and an Info
// line once the type's target is usable again or no longer stored. A
// different unusable target stored for the type is warned about anew.
// Without it, every reload (every pushRefreshInterval, and after each
// PutType) logged each such target at Error for as long as it stayed
// stored. It is used by the pusher's refresh loop only.
type badTargetLog struct {
	log   *slog.Logger
	every time.Duration // the reminder interval; 0 is pushBadTargetReminder
	types map[string]*badTarget
	// met are the types whose unusable target the current reload met,
	// since beginReload.
	met map[string]bool
}

// badTarget is the state of one type's unusable target.
type badTarget struct {
	raw             string // the stored target
	reloads         int    // that met it
	since, reminded time.Time
}

// beginReload begins a reload of the stored types: no type is met yet.
func (b *badTargetLog) beginReload() {
	clear(b.met)
}

// unusable logs that typ's stored target raw cannot be used, what
// ("undecodable" or "invalid") saying why, with err.
func (b *badTargetLog) unusable(typ, raw, what string, err error) {
	if b.met == nil {
		b.met = make(map[string]bool)
	}
	b.met[typ] = true
	now := time.Now()
	every := b.every
	if every <= 0 {
		every = pushBadTargetReminder
	}
	bt := b.types[typ]
	switch {
	case bt == nil || bt.raw != raw:
		if b.types == nil {
			b.types = make(map[string]*badTarget)
		}
		b.types[typ] = &badTarget{raw: raw, reloads: 1, since: now, reminded: now}
		b.log.Warn("push: "+what+" target; type not delivered", "type", typ, "err", err)
	case now.Sub(bt.reminded) >= every || now.Before(bt.reminded):
		bt.reloads++
		bt.reminded = now
		b.log.Warn("push: "+what+" target still stored; type not delivered", "type", typ,
			"reloads", bt.reloads, "for", now.Sub(bt.since).Round(time.Second), "err", err)
	default:
		bt.reloads++
		b.log.Debug("push: "+what+" target; type not delivered", "type", typ, "reloads", bt.reloads, "err", err)
	}
}

// reloaded ends a complete reload: a type whose unusable target it did
// not meet had it replaced by a usable one (delivered reports so) or
// removed, which is logged at Info.
func (b *badTargetLog) reloaded(delivered func(typ string) bool) {
	for typ, bt := range b.types {
		if b.met[typ] {
			continue
		}
		delete(b.types, typ)
		after := time.Since(bt.since).Round(time.Millisecond)
		if delivered(typ) {
			b.log.Info("push: target usable again", "type", typ, "reloads", bt.reloads, "after", after)
		} else {
			b.log.Info("push: unusable target removed", "type", typ, "reloads", bt.reloads, "after", after)
		}
	}
}
