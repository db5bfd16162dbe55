package engine

import (
	"context"
	"fmt"
	"slices"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const groups = 12
	answers := make([]chan []store.Task, groups)
	for i := range groups {
		answers[i] = startLongPolls(ctx, b, 1, fmt.Sprintf("tenant.%d", i))
	}
	waitLongPolls(t, b, groups)
	waitFor(t, "every long poll's first fetch", func() bool {
		for i := range groups {
			if st.count(fmt.Sprintf("tenant.%d", i)) == 0 {
				return false
			}
		}
		return true
	})
	// The listener's first connection wakes every fetcher once: count from
	// when the counts have held still for 100 ms.
	snapshot := func() []int {
		n := make([]int, groups)
		for i := range groups {
			n[i] = st.count(fmt.Sprintf("tenant.%d", i))
		}
		return n
	}
	before := snapshot()
	for still, deadline := time.Now(), time.Now().Add(10*time.Second); time.Since(still) < 100*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("the long polls kept fetching for 10 s with nothing enqueued")
		}
		time.Sleep(5 * time.Millisecond)
		if now := snapshot(); !slices.Equal(now, before) {
			before, still = now, time.Now()
		}
	}
	id := mustEnqueue(t, a, "tenant.7", `1`)
	if ts := recvWithin(t, answers[7], 10*time.Second, "the tenant.7 long poll on the other node to answer"); len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("the tenant.7 long poll answered %v, want task %s", ts, id)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		for i := range groups {
			typ := fmt.Sprintf("tenant.%d", i)
			if n := st.count(typ) - before[i]; i != 7 && n > 0 {
				t.Fatalf("a task of tenant.7 enqueued on another node made the long poll of %s query the database %d times", typ, n)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}
