package engine

import (
	"log/slog"
	"time"
)

// outageReminder is how often a loop whose store call keeps failing (the
// database is away) warns again that it does, with how many failed and
// for how long.
const outageReminder = time.Minute

// outageLog logs the failures of a store call that a loop makes again and
// again (a fetch, a scheduler pass, the leader lease) once per outage
// rather than at every attempt: the first failure is a warning, the
// attempts after it are at Debug, with a warning again at most once per
// reminder interval ("... still failing", with failures and for), and the
// first call that works again ends the outage (recovered, or ended for a
// loop that logs its own line). It is used by one goroutine.
type outageLog struct {
	log   *slog.Logger
	attrs []any         // name the loop in its lines
	then  string        // appended to the failure lines: "; backing off"
	every time.Duration // the reminder interval; 0 is outageReminder

	failures        int // in a row
	since, reminded time.Time
}

// failed counts a failure of the call named what ("promote due tasks")
// and logs it as what+" failed" (the first), what+" still failing" (a
// reminder) or what+" failed again" (at Debug), each followed by then,
// with the loop's attributes, kv and err.
func (o *outageLog) failed(what string, err error, kv ...any) {
	o.failures++
	every := o.every
	if every <= 0 {
		every = outageReminder
	}
	switch now := time.Now(); {
	case o.failures == 1:
		o.since, o.reminded = now, now
		o.log.Warn(what+" failed"+o.then, o.with(kv, "err", err)...)
	case now.Sub(o.reminded) >= every:
		o.reminded = now
		o.log.Warn(what+" still failing"+o.then, o.with(kv, "failures", o.failures, "for", now.Sub(o.since).Round(time.Second), "err", err)...)
	default:
		o.log.Debug(what+" failed again"+o.then, o.with(kv, "failures", o.failures, "err", err)...)
	}
}

// ended ends an outage, if there was one: it returns how many calls failed
// in a row and for how long (0 and 0 when none did) and starts counting
// afresh.
func (o *outageLog) ended() (failures int, after time.Duration) {
	if o.failures == 0 {
		return 0, 0
	}
	failures, after = o.failures, time.Since(o.since).Round(time.Millisecond)
	o.failures = 0
	return failures, after
}

// recovered ends an outage, if there was one, logging msg at Info with the
// loop's attributes, kv, failures and after.
func (o *outageLog) recovered(msg string, kv ...any) {
	if failures, after := o.ended(); failures > 0 {
		o.log.Info(msg, o.with(kv, "failures", failures, "after", after)...)
	}
}

// with returns the loop's attributes followed by kv and more, in a new
// slice.
func (o *outageLog) with(kv []any, more ...any) []any {
	return append(append(append(make([]any, 0, len(o.attrs)+len(kv)+len(more)), o.attrs...), kv...), more...)
}
