package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// These tests steer the group writer with advisory locks held by another
// session: a write that takes a lock held elsewhere stays in flight until
// the test releases it, so the groups form exactly as the test needs,
// without timing assumptions.

// lockWrite is a group write that takes advisory lock key (waiting for it)
// and then runs the extra statements, which may fail.
func lockWrite(ctx context.Context, key int64, extra ...string) *groupWrite {
	return &groupWrite{ctx: ctx, done: make(chan error, 1),
		queue: func(b *pgx.Batch) {
			b.Queue("SELECT pg_advisory_xact_lock($1)", key)
			for _, q := range extra {
				b.Queue(q)
			}
		},
		read: func(br pgx.BatchResults) error {
			for range 1 + len(extra) {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return nil
		}}
}

// connect opens a plain session on url, closed when t ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// leased inserts n tasks and leases them all, in task id order.
func leased(t *testing.T, s *Store, prefix string, n int, now time.Time) []store.Task {
	t.Helper()
	if _, err := s.InsertTasks(t.Context(), store.InsertParams{Tasks: newTasks(prefix, n), Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.FetchTasks(t.Context(), store.FetchParams{Limit: n, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(got) != n {
		t.Fatalf("fetch: %v %v", got, err)
	}
	slices.SortFunc(got, func(a, b store.Task) int { return strings.Compare(a.ID, b.ID) })
	return got
}

// waitQueued polls until n writes wait in the writer's queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.wq.len() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes never queued", n)
		}
	}
}

// waitUntil polls query (one boolean) on c until it is true.
func waitUntil(t *testing.T, c *pgx.Conn, what, query string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ok bool
		if err := c.QueryRow(t.Context(), query, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitAdvisoryWaiter waits until a session of this database waits for an
// advisory lock.
func waitAdvisoryWaiter(t *testing.T, c *pgx.Conn) {
	t.Helper()
	waitUntil(t, c, "a session to wait for an advisory lock", `SELECT count(*) > 0 FROM pg_locks
		WHERE NOT granted AND locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

// stallWriter takes advisory lock 1 (and 2 with both) on x, then makes the
// store's writer send a group that waits for lock 1, so that what callers
// submit next queues behind it. Release lock 1 on x to let the writer go;
// the returned write answers when its group ends.
func stallWriter(t *testing.T, s *Store, x *pgx.Conn, both bool) *groupWrite {
	t.Helper()
	locks := "SELECT pg_advisory_lock(1)"
	if both {
		locks = "SELECT pg_advisory_lock(1), pg_advisory_lock(2)"
	}
	if _, err := x.Exec(t.Context(), locks); err != nil {
		t.Fatal(err)
	}
	hold := lockWrite(t.Context(), 1)
	s.wq.push(hold)
	waitAdvisoryWaiter(t, x)
	return hold
}

// TestGroupRetryDoesNotKeepRolledBackOutcomes: an outcome batch shares a
// group with a write that fails, so the group rolls back and the writer
// runs each write again alone. Meanwhile another session cancelled the
// task, so the outcome no longer applies: RecordOutcomes must report the
// lease lost, not what the rolled-back first run had seen. (Should the
// outcome's second run reach the row before the cancel, it applies and the
// cancel does not: the report must then be a success.)
func TestGroupRetryDoesNotKeepRolledBackOutcomes(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx := t.Context()
	now := time.Now()
	task := leased(t, s, "g", 1, now)[0]

	x := connect(t, url) // holds the locks that steer the writer
	// The writer sends hold and waits in it for lock 1.
	hold := stallWriter(t, s, x, true)

	// Queued behind it: the outcome, then a write that waits for lock 2 and
	// then fails.
	type result struct {
		errs []error
		err  error
	}
	res := make(chan result, 1)
	go func() {
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
			TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
		res <- result{errs, err}
	}()
	waitQueued(t, s, 1)
	bad := lockWrite(ctx, 2, "SELECT 1/0")
	s.wq.push(bad)

	// Release lock 1: hold commits, and the group [outcome, bad] goes out.
	// The outcome updates the task; bad then waits for lock 2.
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	if err := <-hold.done; err != nil {
		t.Fatalf("hold: %v", err)
	}
	waitAdvisoryWaiter(t, x)

	// Another session cancels the task; it waits for the group's row lock.
	y := connect(t, url)
	var ypid int
	if err := y.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&ypid); err != nil {
		t.Fatal(err)
	}
	yctx, ycancel := context.WithCancel(context.Background())
	cancelled, ydone := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(ydone)
		_, err := y.Exec(yctx,
			"UPDATE tasks SET state = 'cancelled', lease_id = NULL, lease_expires_at = NULL WHERE id = $1 AND state = 'running'", task.ID)
		cancelled <- err
	}()
	t.Cleanup(func() { // before y closes, if the test stops early
		ycancel()
		select {
		case <-ydone:
		case <-time.After(10 * time.Second):
		}
	})
	waitUntil(t, x, "the cancel to wait for the group's row lock",
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", ypid)

	// Release lock 2: bad divides by zero, the group rolls back, the cancel
	// commits, and the outcome, run again alone, finds the task cancelled.
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(2)"); err != nil {
		t.Fatal(err)
	}
	if err := <-bad.done; err == nil {
		t.Fatal("the failing write succeeded")
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("cancel: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("RecordOutcomes: %v", r.err)
	}
	var state string
	if err := x.QueryRow(ctx, "SELECT state FROM tasks WHERE id = $1", task.ID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	// Usually the cancel takes the row as soon as the group rolls back.
	// PostgreSQL does not promise it, though: the outcome, run again at
	// once, may lock the row first and apply; the cancel then finds the
	// task no longer running. Either way the report must match the row.
	switch {
	case state == "cancelled" && errors.Is(r.errs[0], store.ErrLeaseLost):
	case state == "succeeded" && r.errs[0] == nil:
		t.Log("the outcome's second run took the row before the cancel did")
	default:
		t.Fatalf("task is %s; the outcome reported %v", state, r.errs[0])
	}
}

// TestGroupLocksRowsInIDOrder: a group holding two outcome batches, the
// task with the larger id first, meets a heartbeat that extends both
// leases (locking rows in id order) between the two batches. Without the
// group's own id-ordered lock, each side waits for the other and
// PostgreSQL aborts one after deadlock_timeout: either the heartbeat fails,
// or the group rolls back and its writes run again one by one.
func TestGroupLocksRowsInIDOrder(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx := t.Context()
	now := time.Now()
	tasks := leased(t, s, "d", 2, now)
	lo, hi := tasks[0], tasks[1]
	x := connect(t, url)
	hold := stallWriter(t, s, x, true)

	// Queue the group: the outcome of hi, a pause on lock 2, the outcome of lo.
	record := func(tk store.Task) chan error {
		ch := make(chan error, 1)
		go func() {
			errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
				TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
			if err == nil {
				err = errs[0]
			}
			ch <- err
		}()
		return ch
	}
	hiDone := record(hi)
	waitQueued(t, s, 1)
	pause := lockWrite(ctx, 2)
	s.wq.push(pause)
	loDone := record(lo)
	waitQueued(t, s, 3)

	// The group goes out: it updates hi, then waits for lock 2.
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	if err := <-hold.done; err != nil {
		t.Fatalf("hold: %v", err)
	}
	before := s.GroupStats() // hold is counted before it is answered
	waitAdvisoryWaiter(t, x)

	// The heartbeat for both tasks waits for a row the group holds.
	extended := make(chan error, 1)
	go func() {
		_, err := s.ExtendLeases(context.Background(), store.ExtendParams{Now: now, Leases: []store.LeaseRef{
			{TaskID: lo.ID, LeaseID: lo.LeaseID, ExpiresAt: now.Add(2 * time.Minute)},
			{TaskID: hi.ID, LeaseID: hi.LeaseID, ExpiresAt: now.Add(2 * time.Minute)}}})
		extended <- err
	}()
	waitUntil(t, x, "the heartbeat to wait for a row lock", `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'`)

	// The group goes on to lo and commits; then the heartbeat finds both
	// tasks finished.
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(2)"); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan error{"outcome of hi": hiDone, "outcome of lo": loDone, "pause": pause.done} {
		if err := <-ch; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if err := <-extended; err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	after := s.GroupStats()
	if groups, writes := after.Groups-before.Groups, after.Writes-before.Writes; groups != 1 || writes != 3 {
		t.Errorf("the group ran as %d transaction(s) for %d writes, want 1 for 3 (it rolled back and ran again write by write)", groups, writes)
	}
}

// TestCloseAnswersQueuedWritesWithErrClosed: a write still queued when the
// store closes (behind a group in flight) is answered ErrClosed. The
// writer's select sees both the queue's signal and the closing and may pick
// either; it used to send the queued write with the cancelled context half
// the time, and its caller, whose own context was fine, got "context
// canceled".
func TestCloseAnswersQueuedWritesWithErrClosed(t *testing.T) {
	url := pgtest.URL(t)
	x := connect(t, url)
	for i := range 8 {
		s := openURL(t, url, func(c *Config) { c.MinConns, c.MaxConns = 2, 2 })
		ctx := t.Context()
		now := time.Now()
		tk := leased(t, s, fmt.Sprintf("c%d-", i), 1, now)[0]
		hold := stallWriter(t, s, x, false)
		res := make(chan error, 1)
		go func() {
			_, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
				TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateSucceeded}}})
			res <- err
		}()
		waitQueued(t, s, 1)
		s.Close()
		<-hold.done
		err := <-res
		if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("run %d: a write queued when the store closed was answered %v, want ErrClosed", i, err)
		}
	}
}

// TestGroupFaultyOutcomeBatchDoesNotFailOthers: one caller's outcome batch
// names a task twice (the statement-by-statement path) with an effective
// priority beyond 32 bits, in the same group as another caller's valid
// batch. Only the faulty entries fail. Before, pgx could not encode the
// priority, the group was never sent, and that error went to every write of
// the group (runGroup re-ran writes alone only after a statement error; see
// groupUndone).
func TestGroupFaultyOutcomeBatchDoesNotFailOthers(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx := t.Context()
	now := time.Now()
	tasks := leased(t, s, "e", 2, now)
	good, bad := tasks[0], tasks[1]

	x := connect(t, url)
	hold := stallWriter(t, s, x, false)

	type result struct {
		errs []error
		err  error
	}
	goodDone, badDone := make(chan result, 1), make(chan result, 1)
	go func() {
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
			TaskID: good.ID, LeaseID: good.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
		goodDone <- result{errs, err}
	}()
	waitQueued(t, s, 1)
	go func() {
		o := store.Outcome{TaskID: bad.ID, LeaseID: bad.LeaseID, State: store.StateRetryWaiting,
			RunAt: now.Add(time.Minute), EffectivePrio: 1 << 40,
			Error: &store.ErrorInfo{Code: "E", Message: "m"}, OutcomeKind: store.OutcomeFailed}
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{o, o}})
		badDone <- result{errs, err}
	}()
	waitQueued(t, s, 2)
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	if err := <-hold.done; err != nil {
		t.Fatalf("hold: %v", err)
	}
	b := <-badDone
	t.Logf("faulty batch: %v %v", b.errs, b.err)
	g := <-goodDone
	if g.err != nil || g.errs[0] != nil {
		t.Errorf("the valid outcome batch failed because it shared a group with a faulty one: %v %v", g.err, g.errs)
	}
}

func TestGroupUndone(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "23505"}, true},
		{fmt.Errorf("send: %w", &pgconn.PgError{Code: "22P02"}), true},
		{pgx.ErrPreprocessingBatch{}, true},
		{fmt.Errorf("batch: %w", pgx.ErrPreprocessingBatch{}), true},
		{errors.New("connection reset by peer"), false},
		{context.Canceled, false},
		{io.ErrUnexpectedEOF, false},
	} {
		if got := groupUndone(c.err); got != c.want {
			t.Errorf("groupUndone(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestWriterRecoversFromSilentlyCutConnection: the network path of the
// pool's one open connection is cut silently (no reset, no close) before
// the writer sends a group on it. The caller gives up at its deadline; the
// writer must give up on that group too, since nobody waits for it, so that
// the next write goes out on a new connection. It used to send every group
// with the store's own context and wait on the dead connection until the
// kernel gave up on it (many minutes), failing every enqueue and outcome of
// the node meanwhile.
func TestWriterRecoversFromSilentlyCutConnection(t *testing.T) {
	t.Parallel()
	proxy, url := newCutProxy(t, pgtest.URL(t))
	s := openURL(t, url, func(c *Config) { c.MaxConns = 2 })
	ctx := t.Context()
	// Down to one open connection: the group below must take that one. (pgx
	// keeps the pool slot of a connection it gave up on until the server
	// closed it or 15 s passed, so the second slot must be free.)
	s.Pool().Reset()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("a", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); proxy.open() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open through the proxy, want the pool's 1", proxy.open())
		}
	}
	if n := proxy.cut(); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := s.InsertTasks(short, store.InsertParams{Tasks: newTasks("b", 1), Now: t0})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("insert over the cut connection: %v, want the caller's deadline", err)
	}
	start := time.Now()
	next, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.InsertTasks(next, store.InsertParams{Tasks: newTasks("c", 1), Now: t0}); err != nil {
		t.Fatalf("insert after the writer's caller gave up: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	if _, err := s.GetTask(ctx, "c000000"); err != nil {
		t.Fatal(err)
	}
	proxy.close() // ends the cut connection, which pgx waits for on Close
}
