package engine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// lateFirstFetch is a store whose first fetch that leases tasks answers
// as one that took until half a watchdog margin before the leases' expiry
// would: the engine is told an expiry that close (the store keeps the
// real one, so giving the lease back works).
type lateFirstFetch struct {
	outcomeLog
	margin time.Duration
	mu     sync.Mutex
	lease  string // the lease id of the late fetch's task
}

func (s *lateFirstFetch) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(ctx, p)
	if err != nil || len(ts) == 0 {
		return ts, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == "" {
		s.lease = ts[0].LeaseID
		ts[0].LeaseExpiresAt = p.Now.Add(s.margin / 2)
	}
	return ts, nil
}

// TestPushDoesNotDeliverATaskWhoseLeaseIsAboutToExpire: a push task whose
// lease is less than the watchdog's margin from its expiry when its
// delivery would start (its fetch answered late) is not sent: its lease
// is given back and the task is delivered under a new one, as in-process
// workers do. Before, the request went out on a lease running out under
// it, and its outcome was recorded under that lease.
func TestPushDoesNotDeliverATaskWhoseLeaseIsAboutToExpire(t *testing.T) {
	const lease = time.Second
	st := &lateFirstFetch{outcomeLog: outcomeLog{Store: backendtest.Open(t, "sqlite", "NORMAL")}, margin: watchdogMargin(lease)}
	e, err := New(Config{Store: st, NodeID: "push-node", Version: "test", PollInterval: 50 * time.Millisecond, LeaseDuration: lease})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Close()
		_ = st.Close()
	})
	p := &pushEnv{t: t, e: e}
	srv := target(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	p.putType("push.late", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 1})
	id := p.enqueue("push.late", `{}`)
	p.wait(id, store.StateSucceeded)
	st.mu.Lock()
	late := st.lease
	st.mu.Unlock()
	if late == "" {
		t.Fatal("no fetch leased the task")
	}
	for _, o := range st.of(id) {
		if o.LeaseID == late && o.State != store.StatePending {
			t.Errorf("outcome %s recorded under the lease that was about to expire when the delivery could start", o.State)
		}
	}
}
