package api

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/retryq/retryq/internal/outage"
	"github.com/retryq/retryq/store"
)

// dbOutages logs the database's outages as the API meets them, once per
// outage of each kind rather than per request: a warning when requests
// start failing, an Info line when they work again, the failures in
// between at Debug with a reminder at most once a minute, and outages
// that keep coming back warned about at most once a minute too
// (outage.Tracker). Without it, a client retrying and a load balancer
// probing wrote a line per request for as long as the database was away.
//
// Each kind ends with a success of its kind only, so that a database that
// fails some writes and not others is one outage, not one per pair of
// requests: a full disk ends when an enqueue commits (or /readyz, whose
// probe then writes an enqueue-sized row, says ready), corruption that
// only some statements meet ends when each route that met it works again,
// and any other unavailability when a write other than a lease (which may
// have leased nothing) works, or /readyz says ready, or, when no write met
// it (a node that serves reads only meanwhile), when a read works.
type dbOutages struct {
	unavailable, full, corrupt outage.Tracker

	mu      sync.Mutex
	damaged map[string]bool // the routes ("POST /v1/tasks") that met corruption
	// writeMet says that a write met the unavailable outage: reads may
	// work while writes do not (SQLite's write lock held by another
	// process), so a read no longer ends it.
	writeMet bool
}

// outageKind names a kind of outage in its log lines.
const (
	kindUnavailable = "unavailable"
	kindFull        = "storage_full"
	kindCorrupt     = "corrupt"
)

// failed logs a request that failed with err, classified as ae, a 503 of
// the database.
func (s *server) outageFailed(r *http.Request, ae *apiError, err error) {
	o := &s.dbDown
	t, msg := &o.unavailable, "api: database unavailable; answering 503 until it is back"
	switch {
	case ae.Code == CodeStorageFull:
		t, msg = &o.full, "api: database storage full; answering 503 to writes until space is freed"
	case errors.Is(err, store.ErrCorrupt):
		t, msg = &o.corrupt, "api: database reports corruption; answering 503 until it is repaired (see its server log)"
		if ae.Message == msgCorrupt {
			msg = "api: database file corrupt; answering 503 until it is restored"
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.damaged == nil {
			o.damaged = make(map[string]bool)
		}
		o.damaged[r.Pattern] = true
	default:
		if r.Method != http.MethodGet { // /readyz's failures do not come here
			o.mu.Lock()
			o.writeMet = true
			o.mu.Unlock()
		}
	}
	now := time.Now()
	kv := []any{"request_id", requestIDFrom(r.Context()), "method", r.Method, "path", r.URL.Path}
	switch step, failures, since := t.Failure(now); step {
	case outage.First:
		s.log.Warn(msg, append(kv, "err", err)...)
	case outage.Reminder:
		s.log.Warn(msg, append(kv, "failures", failures, "for", now.Sub(since).Round(time.Second), "err", err)...)
	default:
		s.log.Debug("api request failed", append(kv, "status", ae.Status, "failures", failures, "err", err)...)
	}
}

// outageSucceeded ends the outages that a success of r ends; writes says
// whether its route writes to the database (or is /readyz).
func (s *server) outageSucceeded(r *http.Request, writes bool) {
	o := &s.dbDown
	enqueue := r.Pattern == "POST /v1/tasks" || r.Pattern == "POST /v1/tasks/batch"
	readyz := r.Pattern == "GET /readyz"
	if enqueue || readyz {
		s.outageEnded(r, &o.full, kindFull)
	}
	if o.unavailable.Down() {
		o.mu.Lock()
		end := (writes && r.Pattern != "POST /v1/leases") || !o.writeMet
		if end {
			o.writeMet = false
		}
		o.mu.Unlock()
		if end {
			s.outageEnded(r, &o.unavailable, kindUnavailable)
		}
	}
	if o.corrupt.Down() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.damaged[r.Pattern] {
			delete(o.damaged, r.Pattern)
			if len(o.damaged) == 0 {
				s.outageEnded(r, &o.corrupt, kindCorrupt)
			}
		}
	}
}

// outageEnded ends t's outage, if there was one, logging its end.
func (s *server) outageEnded(r *http.Request, t *outage.Tracker, kind string) {
	failures, after, logged := t.Success(time.Now())
	if failures == 0 {
		return
	}
	level := slog.LevelDebug // an outage that came back within the minute
	if logged {
		level = slog.LevelInfo
	}
	s.log.Log(r.Context(), level, "api: database available again", "request_id", requestIDFrom(r.Context()),
		"method", r.Method, "path", r.URL.Path, "outage", kind, "failures", failures, "after", after.Round(time.Millisecond))
}
