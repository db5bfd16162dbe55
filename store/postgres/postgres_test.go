package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// openURL opens a migrated store on url, closed when t ends.
func openURL(t testing.TB, url string, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{URL: url, AutoMigrate: true, ReconnectMax: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newTasks(prefix string, n int) []store.NewTask {
	ts := make([]store.NewTask, n)
	for i := range ts {
		id := fmt.Sprintf("%s%06d", prefix, i)
		ts[i] = store.NewTask{ID: id, Type: "email", Payload: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`)}
	}
	return ts
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "URL"},
		{Config{URL: "postgres://x/y", MaxConns: -1}, "MaxConns"},
		{Config{URL: "postgres://x/y", MinConns: -1}, "MinConns"},
		{Config{URL: "postgres://x/y", MinConns: 5, MaxConns: 2}, "MinConns"},
		{Config{URL: "postgres://x/y", ReconnectMin: time.Second, ReconnectMax: time.Millisecond}, "ReconnectMin"},
		{Config{URL: "postgres://x:notaport/y"}, "URL"},
		{Config{URL: "postgres://x/y", MigrateLockTimeout: -time.Second}, "MigrateLockTimeout"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%+v: error %v, want ErrInvalid", tc.cfg, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %q does not name %s", tc.cfg, err, tc.field)
		}
	}
	if err := (Config{URL: "postgres://localhost/db"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestClosedAndUnavailable(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	s.Close()
	if _, err := s.GetTask(ctx, "x"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("GetTask after Close: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Ping after Close: %v", err)
	}
	if _, ok := <-s.Wakeups(ctx); ok {
		t.Errorf("Wakeups after Close delivered a value")
	}
	// Nothing listens on port 1.
	_, err := Open(ctx, Config{URL: "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open of unreachable server: %v", err)
	}
}

// TestPayloadBytes checks payloads come back byte for byte (not
// normalized as jsonb would) and times at microsecond precision.
func TestPayloadBytes(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	raw := json.RawMessage("{ \"b\" : 1,\n  \"a\": [1.50, \"\\u00e9\"] }")
	now := t0.Add(123456789 * time.Nanosecond)
	res, err := s.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{
		{ID: "a", Type: "t", Payload: raw},
		{ID: "b", Type: "t"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []json.RawMessage{raw, nil} {
		got, err := s.GetTask(ctx, res[i].Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Payload) != string(want) || (want == nil) != (got.Payload == nil) {
			t.Errorf("payload %q, want %q", got.Payload, want)
		}
		if wantT := now.Truncate(time.Microsecond); !got.CreatedAt.Equal(wantT) || !got.RunAt.Equal(wantT) {
			t.Errorf("CreatedAt %v RunAt %v, want %v", got.CreatedAt, got.RunAt, wantT)
		}
	}
}

// TestFetchSkipLocked fetches from two pools concurrently: no task is leased
// twice and every task is leased once.
func TestFetchSkipLocked(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openURL(t, url, nil), openURL(t, url, nil)
	ctx := t.Context()
	const n = 600
	if _, err := a.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("t", n), Now: t0}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for w := range 6 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for {
				ts, err := s.FetchTasks(ctx, store.FetchParams{Limit: 7, WorkerID: worker, LeaseDuration: time.Minute, Now: t0})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, task := range ts {
					if prev, dup := seen[task.ID]; dup {
						t.Errorf("task %s leased by %s and %s", task.ID, prev, worker)
					}
					seen[task.ID] = worker
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("leased %d tasks, want %d", len(seen), n)
	}
}

// TestFetchDoesNotBlock holds a row lock on the first pending task in
// another transaction: a fetch skips it instead of waiting.
func TestFetchDoesNotBlock(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openURL(t, url, nil), openURL(t, url, nil)
	ctx := t.Context()
	if _, err := a.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("t", 3), Now: t0}); err != nil {
		t.Fatal(err)
	}
	tx, err := a.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM tasks WHERE id = 't000000' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ts, err := b.FetchTasks(fctx, store.FetchParams{Limit: 10, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].ID != "t000001" || ts[1].ID != "t000002" {
		t.Fatalf("fetched %v, want the two unlocked tasks", taskIDs(ts))
	}
}

func taskIDs(ts []store.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func waitWakeup(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: wakeup channel closed", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no wakeup within 10s", what)
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// settleWakeups sends a marker notification through via and waits for the
// listener whose cancellations arrive on cancels to hand it over: the
// listener handles notifications one at a time, in commit order, so every
// wake-up committed before the marker has then been sent to ch. What ch
// holds is taken and returned: whether anything woke it since it was last
// emptied. Draining for a quiet spell instead let a wake-up that a loaded
// machine delivered late count for the next step.
func settleWakeups(t *testing.T, via *Store, cancels <-chan store.LeaseRef, ch <-chan struct{}) bool {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	payload, _ := cancelPayload(marker, "m")
	if _, err := via.pool.Exec(t.Context(), "SELECT pg_notify("+notifyChannelSQL+", $1::text)", payload); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ref, ok := <-cancels:
			if !ok {
				t.Fatal("cancellation channel closed")
			}
			if ref.TaskID != marker {
				continue
			}
			select {
			case _, ok := <-ch:
				return ok
			default:
				return false
			}
		case <-timeout:
			t.Fatalf("marker %s not delivered within 10s", marker)
		}
	}
}

func TestWakeups(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	listener, writer := openURL(t, url, nil), openURL(t, url, nil)
	poll := openURL(t, url, func(c *Config) { c.PollOnly = true })
	ctx, cancel := context.WithCancel(t.Context())
	ch := listener.Wakeups(ctx)
	cancels := listener.Cancellations(ctx)
	pollCh := poll.Wakeups(ctx)
	// The listener wakes once it listens. A fixed wait here used to let
	// a slow LISTEN miss the insert below, whose check then passed on
	// this wake-up alone.
	waitWakeup(t, ch, "listener up")

	if _, err := writer.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("a", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, ch, "insert")

	future := newTasks("s", 1)
	future[0].RunAt = t0.Add(time.Minute)
	if _, err := writer.InsertTasks(ctx, store.InsertParams{Tasks: future, Now: t0}); err != nil {
		t.Fatal(err)
	}
	settleWakeups(t, writer, cancels, ch)
	if n, err := writer.PromoteDue(ctx, store.PromoteParams{Limit: 10, Now: t0.Add(time.Minute)}); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v", n, err)
	}
	waitWakeup(t, ch, "promote")

	ts, err := writer.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(ts) != 1 {
		t.Fatalf("FetchTasks = %v, %v", ts, err)
	}
	settleWakeups(t, writer, cancels, ch)
	errs, err := writer.RecordOutcomes(ctx, store.OutcomeParams{Now: t0, Outcomes: []store.Outcome{
		{TaskID: ts[0].ID, LeaseID: ts[0].LeaseID, State: store.StatePending}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("release: %v %v", err, errs)
	}
	waitWakeup(t, ch, "release")

	// The PollOnly store neither notifies nor listens.
	settleWakeups(t, writer, cancels, ch)
	if _, err := poll.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("p", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	if settleWakeups(t, writer, cancels, ch) {
		t.Fatal("PollOnly insert notified")
	}
	select {
	case <-pollCh:
		t.Fatal("PollOnly Wakeups fired")
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	for range ch {
	}
	for range pollCh {
	}
}

// TestServerRestart restarts a private cluster under a store: the Wakeups
// channel keeps working (with a wakeup after the reconnect), calls made
// while the server is down fail with ErrUnavailable, and the store recovers
// once the server is back.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	url := c.NewDatabase(t)
	s, other := openURL(t, url, nil), openURL(t, url, nil)
	ctx := t.Context()
	ch := s.Wakeups(ctx)
	waitWakeup(t, ch, "listener up") // sent once LISTEN is in effect
	if _, err := other.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("a", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, ch, "insert before restart")

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetTask(ctx, "a000000")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("GetTask while down: %v, want ErrUnavailable", err)
	}
	drain(ch)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, ch, "reconnect")

	// Store methods recover: the pool replaces dead connections.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := other.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("b", 1), Now: t0})
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("InsertTasks after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitWakeup(t, ch, "insert after restart")
	if _, err := s.GetTask(ctx, "b000000"); err != nil {
		t.Fatalf("GetTask after restart: %v", err)
	}
}

// TestIdempotencyConcurrent inserts the same idempotency key from several
// pools at once: exactly one insert wins and every caller gets that task.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	stores := []*Store{openURL(t, url, nil), openURL(t, url, nil)}
	ctx := t.Context()
	const n = 8
	res := make([]store.InsertResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := stores[i%2].InsertTasks(ctx, store.InsertParams{Now: t0, Tasks: []store.NewTask{
				{ID: fmt.Sprintf("t%d", i), Type: "x", IdempotencyKey: "k"},
				{ID: fmt.Sprintf("u%d", i), Type: "x"},
			}})
			if err != nil {
				t.Error(err)
				return
			}
			res[i] = r[0]
		})
	}
	wg.Wait()
	winners := 0
	for _, r := range res {
		if !r.Duplicate {
			winners++
		}
		if r.Task.ID != res[0].Task.ID || r.Task.IdempotencyKey != "k" {
			t.Errorf("result %+v, want task %s", r.Task, res[0].Task.ID)
		}
	}
	if winners != 1 {
		t.Fatalf("%d inserts won, want 1", winners)
	}
}

// TestDeletingTasksDeletesHistory: the attempts table has no foreign key
// (migration 2), so retention and purge must delete the history themselves.
func TestDeletingTasksDeletesHistory(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("h", 4), Now: now}); err != nil {
		t.Fatal(err)
	}
	// Every task fails once (retried at once), then two succeed and two die:
	// 4 failures and 2 deaths in the history (a success is kept in the task
	// row, not as an attempts row).
	round := func(final bool) {
		t.Helper()
		leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: 4, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
		if err != nil || len(leased) != 4 {
			t.Fatalf("FetchTasks: %d tasks, %v", len(leased), err)
		}
		outs := make([]store.Outcome, len(leased))
		for i, l := range leased {
			e := &store.ErrorInfo{Code: "E", Message: "m", Class: "transient"}
			switch {
			case !final:
				outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateRetryWaiting, RunAt: now, Error: e}
			case i%2 == 0:
				outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateSucceeded}
			default:
				outs[i] = store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateDead, DeadReason: store.DeadNonRetryable, Error: e}
			}
		}
		if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: now}); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("RecordOutcomes: %v %v", err, errs)
		}
	}
	round(false)
	round(true)
	history := func() int {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM attempts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := history(); n != 6 {
		t.Fatalf("history rows = %d, want 6", n)
	}
	if n, err := s.PurgeDead(ctx, store.DeadFilter{}); err != nil || n != 2 {
		t.Fatalf("PurgeDead = %d, %v; want 2", n, err)
	}
	if n := history(); n != 2 {
		t.Fatalf("history rows after purging 2 dead tasks = %d, want 2 (the failures of the succeeded ones)", n)
	}
	res, err := s.DeleteFinished(ctx, store.RetentionParams{SucceededBefore: now.Add(time.Hour)})
	if err != nil || res.Succeeded != 2 {
		t.Fatalf("DeleteFinished = %+v, %v; want 2 succeeded", res, err)
	}
	if n := history(); n != 0 {
		t.Fatalf("history rows after retention = %d, want 0", n)
	}
}

// TestCancellations checks that cancelling a running task tells every
// listening store which task and lease, and that cancelling a task nobody
// runs tells nothing.
func TestCancellations(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	listener, writer := openURL(t, url, nil), openURL(t, url, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cancels := listener.Cancellations(ctx)
	wake := listener.Wakeups(ctx)
	// LISTEN is up once an insert's wakeup arrives.
	for i := 0; ; i++ {
		if _, err := writer.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprintf("w%d-", i), 1), Now: t0}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wake:
		case <-time.After(200 * time.Millisecond):
			if i == 50 {
				t.Fatal("no wakeup from the listener in 10 s")
			}
			continue
		}
		break
	}
	running, err := writer.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(running) != 1 {
		t.Fatalf("FetchTasks = %v, %v", running, err)
	}
	waiting := newTasks("waiting", 1)
	if _, err := writer.InsertTasks(ctx, store.InsertParams{Tasks: waiting, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// Not running: no cancellation. Then the running one: notifications
	// arrive in commit order, so the first one must be this.
	if _, err := writer.CancelTask(ctx, store.CancelParams{ID: waiting[0].ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.CancelTask(ctx, store.CancelParams{ID: running[0].ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	select {
	case ref := <-cancels:
		if ref.TaskID != running[0].ID || ref.LeaseID != running[0].LeaseID {
			t.Fatalf("cancellation %+v, want task %s lease %s", ref, running[0].ID, running[0].LeaseID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cancellation for the running task")
	}
	cancel()
	for range cancels { // closed when ctx ends
	}
}
