package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// notifyingFetches is fetchesByType over a PostgreSQL store that keeps its
// notifications (a wrapper embedding store.Store has none).
type notifyingFetches struct {
	*fetchesByType
	pg *postgres.Store
}

func (s *notifyingFetches) Wakeups(ctx context.Context) <-chan struct{} { return s.pg.Wakeups(ctx) }

func (s *notifyingFetches) TypedWakeups(ctx context.Context) (<-chan struct{}, *store.DueTypes) {
	return s.pg.TypedWakeups(ctx)
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
	checkOnlyItsGroupWakes(t, a, b, st.fetchesByType, 12, " enqueued on another node")
}
