package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// notifyingFetches is fetchesByType over a PostgreSQL store that keeps its
// notifications (a wrapper embedding store.Store has none). It passes the
// typed wake-ups on through a channel of its own, and tells when the
// engine has taken the first one: the listener's, once connected, which
// wakes every long poll.
type notifyingFetches struct {
	*fetchesByType
	pg       *postgres.Store
	out      chan struct{}
	listened atomic.Bool // the first wake-up was passed on
}

func (s *notifyingFetches) Wakeups(ctx context.Context) <-chan struct{} { return s.pg.Wakeups(ctx) }

func (s *notifyingFetches) TypedWakeups(ctx context.Context) (<-chan struct{}, *store.DueTypes) {
	in, due := s.pg.TypedWakeups(ctx)
	s.out = make(chan struct{}, 1)
	go func() {
		defer close(s.out)
		for range in {
			select {
			case s.out <- struct{}{}:
			default: // one is pending already: it covers this one
			}
			s.listened.Store(true)
		}
	}()
	return s.out, due
}

// listenerTaken reports whether the engine has taken the listener's first
// wake-up.
func (s *notifyingFetches) listenerTaken() bool {
	return s.listened.Load() && len(s.out) == 0
}

// TestNotificationWakesOnlyTheLongPollsOfItsType: on PostgreSQL, a task
// enqueued on one node makes only the long polls of its type on another
// node query the database. The notification named no type, so every long
// poll group of every node (the enqueuing node's too, which receives its
// own notification) fetched after every insert anywhere.
func TestNotificationWakesOnlyTheLongPollsOfItsType(t *testing.T) {
	url := pgtest.URL(t)
	a := startWorkerEngine(t, openPG(t, url), Config{NodeID: "enqueuer", NoScheduler: true, PollInterval: time.Minute})
	pg := openPG(t, url)
	st := &notifyingFetches{fetchesByType: &fetchesByType{Store: pg}, pg: pg}
	b := startWorkerEngine(t, st, Config{NodeID: "poller", NoScheduler: true, PollInterval: time.Minute})
	// The listener's connection wakes every long poll once: waited for
	// here, as a connection that took longer than the helper's 100 ms of
	// stillness (a loaded machine, a busy cluster) woke them all inside
	// its count.
	waitFor(t, "the poller's listener to connect", st.listenerTaken)
	checkOnlyItsGroupWakes(t, a, b, st.fetchesByType, 12, " enqueued on another node")
}
