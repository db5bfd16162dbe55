package engine

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestPushStoppedDuringFetchReleasesLeases: an engine closed while a push
// fetch is committing does not lose what the fetch leased (the tasks would
// wait for the reaper, an attempt counted): the fetch ends regardless, and
// the pusher gives the tasks back without delivering them.
func TestPushStoppedDuringFetchReleasesLeases(t *testing.T) {
	backendtest.Run(t, testPushStoppedDuringFetchReleasesLeases)
}

func testPushStoppedDuringFetchReleasesLeases(t *testing.T, backend string) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	st := &fetchHook{Store: openWorkerStoreOn(t, backend), fetched: make(chan struct{}), proceed: make(chan struct{})}
	e, err := New(Config{Store: st, NodeID: "push-stop", PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	defer func() {
		select {
		case <-st.proceed:
		default:
			close(st.proceed)
		}
		_ = e.Close()
	}()
	id := mustEnqueue(t, e, "hook", `1`) // before the target exists: fetched, not pushed at enqueue
	st.armed.Store(true)
	if _, err := e.PutType(context.Background(), TypeSpec{Type: "hook", Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, st.fetched, 10*time.Second, "the push fetch to commit")
	go func() { closed <- e.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		e.push.mu.Lock()
		stopped := e.push.stopped
		e.push.mu.Unlock()
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pusher never began to stop")
		}
	}
	close(st.proceed)
	if err := recvWithin(t, closed, 30*time.Second, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tk, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.LeaseID != "" || tk.Attempt != 0 {
		t.Errorf("after Close: state %s, lease %q, attempt %d; want pending, released, no attempt counted", tk.State, tk.LeaseID, tk.Attempt)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d deliveries after the pusher stopped", n)
	}
}

// lateHeartbeat is a store whose first heartbeat after one that extended a
// lease commits only once the next outcome is on its way (held until then),
// and that outcome waits for it: a heartbeat sent before the lease's expiry
// that commits after the lease watchdog gave up on the lease.
type lateHeartbeat struct {
	store.Store
	armed             atomic.Bool
	late              sync.Once
	letGo, committed  chan struct{}
	letGoOnce         sync.Once
	lateHeartbeatSeen atomic.Bool
}

func (s *lateHeartbeat) ExtendLeases(ctx context.Context, p store.ExtendParams) ([]error, error) {
	if !s.armed.Load() {
		errs, err := s.Store.ExtendLeases(ctx, p)
		if err == nil && len(p.Leases) > 0 && errs[0] == nil {
			s.armed.Store(true)
		}
		return errs, err
	}
	isLate := false
	s.late.Do(func() { isLate = true })
	if !isLate {
		return s.Store.ExtendLeases(ctx, p)
	}
	s.lateHeartbeatSeen.Store(true)
	select {
	case <-s.letGo:
	case <-time.After(10 * time.Second): // the outcome never came
	}
	errs, err := s.Store.ExtendLeases(context.WithoutCancel(ctx), p)
	close(s.committed)
	return errs, err
}

func (s *lateHeartbeat) RecordOutcomes(ctx context.Context, p store.OutcomeParams) ([]error, error) {
	if s.lateHeartbeatSeen.Load() {
		s.letGoOnce.Do(func() { close(s.letGo) })
		select {
		case <-s.committed:
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.RecordOutcomes(ctx, p)
}

// TestPushWatchdogStopGivesBackALeaseALateHeartbeatKept: when the lease
// watchdog aborts a delivery whose heartbeat is late, and that heartbeat
// then commits after all, the delivery gives the lease back: the task is
// delivered again at once, the cut attempt not counted, instead of sitting
// running under a lease nobody holds.
func TestPushWatchdogStopGivesBackALeaseALateHeartbeatKept(t *testing.T) {
	backendtest.Run(t, testPushWatchdogStopGivesBackALeaseALateHeartbeatKept)
}

func testPushWatchdogStopGivesBackALeaseALateHeartbeatKept(t *testing.T, backend string) {
	var requests atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			<-r.Context().Done() // held until the watchdog aborts it
			return
		}
	})
	st := &lateHeartbeat{Store: openWorkerStoreOn(t, backend), letGo: make(chan struct{}), committed: make(chan struct{})}
	// No scheduler: the reaper would otherwise decide the expired lease. The
	// give-back must commit within a heartbeat interval (a third of the
	// lease) of the watchdog's stop, so the lease leaves a loaded machine
	// room for it.
	e, err := New(Config{Store: st, NodeID: "push-late", LeaseDuration: 1500 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := &pushEnv{t: t, e: e}
	p.putType("push.late", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 60})
	id := p.enqueue("push.late", `{}`)
	tk := p.wait(id, store.StateSucceeded)
	if tk.Attempt != 1 {
		t.Errorf("task succeeded at attempt %d; want 1 (the cut delivery given back, not counted)", tk.Attempt)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("target got %d requests, want 2", n)
	}
}

// TestBeginShutdownStopsPushFetchingAndKeepsDeliveries: BeginShutdown,
// which a server calls before it drains its HTTP requests, stops leasing
// push tasks at once, while a delivery already in flight goes on and
// records its outcome. Push fetching used to go on until Close, so a
// server leased (and delivered) tasks all through its drain.
func TestBeginShutdownStopsPushFetchingAndKeepsDeliveries(t *testing.T) {
	backendtest.Run(t, testBeginShutdownStopsPushFetchingAndKeepsDeliveries)
}

func testBeginShutdownStopsPushFetchingAndKeepsDeliveries(t *testing.T, backend string) {
	arrived := make(chan string, 16)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get(HeaderTaskID)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close, which waits for the handlers
	st := openWorkerStoreOn(t, backend)
	e, err := New(Config{Store: st, NodeID: "begin-shutdown", PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	if _, err := e.PutType(context.Background(), TypeSpec{Type: "hook", Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	inFlight := mustEnqueue(t, e, "hook", `1`)
	if id := recvWithin(t, arrived, 20*time.Second, "the first delivery"); id != inFlight {
		t.Fatalf("delivered %s, want %s", id, inFlight)
	}
	e.BeginShutdown()
	later := mustEnqueue(t, e, "hook", `2`)
	select {
	case id := <-arrived:
		t.Fatalf("task %s delivered after BeginShutdown", id)
	case <-time.After(2 * time.Second):
	}
	release <- struct{}{} // the delivery in flight completes
	waitFor(t, "the delivery in flight to succeed", func() bool {
		tk, err := st.GetTask(context.Background(), inFlight)
		return err == nil && tk.State == store.StateSucceeded
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	tk, err := st.GetTask(context.Background(), later)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.Attempt != 0 {
		t.Errorf("task enqueued after BeginShutdown: state %s, attempt %d; want pending, none counted", tk.State, tk.Attempt)
	}
}

// slowTypeRead is a store whose GetType, once armed, answers only when
// let go (or after 10 s): a type configuration that cannot be read in time.
type slowTypeRead struct {
	store.Store
	armed atomic.Bool
	letGo chan struct{}
}

func (s *slowTypeRead) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	if s.armed.Load() {
		select {
		case <-s.letGo:
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.GetType(ctx, typ)
}

// TestPushShutdownWhileReadingTheTypeReleasesAtOnce: a delivery that Close
// cancels while it waits for its type's configuration gives its task back
// at once, as an in-process handler cancelled at the same point does. It
// was held back instead: retry_waiting for 10 s, logged as a type whose
// configuration cannot be read.
func TestPushShutdownWhileReadingTheTypeReleasesAtOnce(t *testing.T) {
	backendtest.Run(t, testPushShutdownWhileReadingTheTypeReleasesAtOnce)
}

func testPushShutdownWhileReadingTheTypeReleasesAtOnce(t *testing.T, backend string) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	st := &slowTypeRead{Store: openWorkerStoreOn(t, backend), letGo: make(chan struct{})}
	defer close(st.letGo)
	e, err := New(Config{Store: st, NodeID: "push-stop-type", PollInterval: 20 * time.Millisecond, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	e.push.grace = 50 * time.Millisecond
	id := mustEnqueue(t, e, "hook", `1`) // the type's read cached here; PutType drops it
	st.armed.Store(true)
	if _, err := e.PutType(context.Background(), TypeSpec{Type: "hook", Policy: fastPolicy(3), Target: &Target{URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery to start", func() bool { return e.leases.leaseOf(id) != "" })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	tk, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.StatePending || tk.Attempt != 0 || tk.RunAt.After(time.Now().Add(time.Second)) {
		t.Errorf("after Close: state %s, attempt %d, due in %v; want pending, none counted, due now",
			tk.State, tk.Attempt, time.Until(tk.RunAt).Round(time.Millisecond))
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests sent without the type's configuration", n)
	}
}

// TestPushShutdownLogsTheDeliveriesItWaitsFor: Close, with a delivery in
// flight, says that it waits for it and for how long before it waits: the
// log of a node stopping used to say nothing for the whole grace (10 s),
// as if the shutdown hung.
func TestPushShutdownLogsTheDeliveriesItWaitsFor(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		hang(r)
	})
	var logBuf syncBuffer
	p := newPushEnvWith(t, "sqlite", Config{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	p.e.push.grace = 50 * time.Millisecond
	p.putType("push.wait", fastPolicy(3), Target{URL: srv.URL, TimeoutSeconds: 60})
	p.enqueue("push.wait", `{}`)
	recvWithin(t, arrived, 10*time.Second, "the delivery")
	if err := p.e.Close(); err != nil {
		t.Fatal(err)
	}
	out := logBuf.String()
	waiting := strings.Index(out, `msg="waiting for push deliveries in flight" node=push-node deliveries=1 grace=50ms`)
	cancelled := strings.Index(out, "push deliveries still running at shutdown")
	if waiting < 0 || cancelled < waiting {
		t.Errorf("want the wait for 1 delivery logged before the cancellation; log:\n%s", out)
	}
}

// TestPushStopAfterEndGracesWithNothingInFlight: a node whose shutdown
// timeout ended the graces before Close reached the pusher, with no
// delivery in flight, does not log that it cancels deliveries still
// running. The grace's end was chosen over the deliveries' end whenever
// the goroutine that reports the latter had not run yet, as is usual
// with none to wait for.
func TestPushStopAfterEndGracesWithNothingInFlight(t *testing.T) {
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {})
	var logBuf syncBuffer
	p := newPushEnvWith(t, "sqlite", Config{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	p.putType("push.idle", fastPolicy(3), Target{URL: srv.URL})
	p.wait(p.enqueue("push.idle", `{}`), store.StateSucceeded)
	for deadline := time.Now().Add(10 * time.Second); p.e.push.inFlight() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delivery's outcome was not recorded within 10s")
		}
	}
	p.e.EndGraces()
	if err := p.e.Close(); err != nil {
		t.Fatal(err)
	}
	if out := logBuf.String(); strings.Contains(out, "still running") {
		t.Errorf("with no delivery in flight, the log says some are cancelled:\n%s", out)
	}
}
