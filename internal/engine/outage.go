package engine

import (
	"log/slog"
	"time"

	"github.com/retryq/retryq/internal/outage"
)

// outageLog logs the failures of a store call that a loop makes again and
// again (a fetch, a scheduler pass, the leader lease) once per outage
// rather than at every attempt, by the rules of outage.Tracker: the first
// failure is a warning, the attempts after it are at Debug, with a warning
// again at most once per reminder interval ("... still failing", with
// failures and for), and the first call that works again ends the outage
// (recovered, or ended for a loop that logs its own line). An outage that
// begins again less than the interval after the last warning (the
// database flaps) is at Debug, its end too. It is used by one goroutine.
type outageLog struct {
	log   *slog.Logger
	attrs []any         // name the loop in its lines
	then  string        // appended to the failure lines: "; backing off"
	every time.Duration // the reminder interval; 0 is outage.DefaultEvery

	t outage.Tracker
}

// failed counts a failure of the call named what ("promote due tasks")
// and logs it as what+" failed" (the first), what+" still failing" (a
// reminder) or what+" failed again" (at Debug), each followed by then,
// with the loop's attributes, kv and err.
func (o *outageLog) failed(what string, err error, kv ...any) {
	o.t.Every = o.every
	now := time.Now()
	switch step, failures, since := o.t.Failure(now); step {
	case outage.First:
		o.log.Warn(what+" failed"+o.then, o.with(kv, "err", err)...)
	case outage.Reminder:
		o.log.Warn(what+" still failing"+o.then, o.with(kv, "failures", failures, "for", now.Sub(since).Round(time.Second), "err", err)...)
	default:
		o.log.Debug(what+" failed again"+o.then, o.with(kv, "failures", failures, "err", err)...)
	}
}

// ended ends an outage, if there was one: it returns how many calls failed
// in a row and for how long, or 0 and 0 when none did or the outage was
// not warned about (it came back within the reminder interval: its end is
// not worth a line either), and starts counting afresh.
func (o *outageLog) ended() (failures int, after time.Duration) {
	failures, after, logged := o.t.Success(time.Now())
	if !logged {
		return 0, 0
	}
	return failures, after.Round(time.Millisecond)
}

// recovered ends an outage, if there was one that was warned about,
// logging msg at Info with the loop's attributes, kv, failures and after.
func (o *outageLog) recovered(msg string, kv ...any) {
	if failures, after := o.ended(); failures > 0 {
		o.log.Info(msg, o.with(kv, "failures", failures, "after", after)...)
	}
}

// stopped ends an outage still open as its loop stops, if it was warned
// about, logging msg at Info with the loop's attributes, kv, failures and
// for: without it the outage's last line was a warning, and no
// "... works again" follows from a loop that no longer runs.
func (o *outageLog) stopped(msg string, kv ...any) {
	if failures, after := o.ended(); failures > 0 {
		o.log.Info(msg, o.with(kv, "failures", failures, "for", after)...)
	}
}

// with returns the loop's attributes followed by kv and more, in a new
// slice.
func (o *outageLog) with(kv []any, more ...any) []any {
	return append(append(append(make([]any, 0, len(o.attrs)+len(kv)+len(more)), o.attrs...), kv...), more...)
}
