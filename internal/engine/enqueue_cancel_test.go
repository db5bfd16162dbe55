package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// lockedStore is a store whose database another session can lock, as an
// operator's session or a second process would, so that every insert
// waits until unlock.
type lockedStore struct {
	store.Store
	lock func(t *testing.T) (unlock func())
}

// openLockableStore opens a store of backend together with a way to hold
// its database's write lock from another session: on SQLite a second
// connection's BEGIN IMMEDIATE on the same file, on PostgreSQL an
// EXCLUSIVE lock on the tasks table.
func openLockableStore(t *testing.T, backend string) lockedStore {
	t.Helper()
	switch backend {
	case backendtest.SQLite:
		path := filepath.Join(t.TempDir(), "retryq.db")
		st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, BusyTimeout: time.Minute})
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return lockedStore{Store: st, lock: func(t *testing.T) func() {
			db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(20000)")
			if err != nil {
				t.Fatalf("open second connection: %v", err)
			}
			conn, err := db.Conn(context.Background())
			if err != nil {
				t.Fatalf("second connection: %v", err)
			}
			if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
				t.Fatalf("take the write lock: %v", err)
			}
			return func() {
				_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
				_ = conn.Close()
				_ = db.Close()
			}
		}}
	default:
		url := pgtest.URL(t)
		return lockedStore{Store: openPG(t, url), lock: func(t *testing.T) func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				cancel()
				t.Fatalf("connect: %v", err)
			}
			tx, err := conn.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, "LOCK TABLE tasks IN EXCLUSIVE MODE")
			}
			if err != nil {
				cancel()
				t.Fatalf("lock the tasks table: %v", err)
			}
			return func() {
				_ = tx.Rollback(ctx)
				_ = conn.Close(ctx)
				cancel()
			}
		}}
	}
}

// countOfType counts the stored tasks of typ.
func countOfType(t *testing.T, e *Engine, typ string) int {
	t.Helper()
	ts, _, err := e.List(context.Background(), store.ListParams{Type: typ, Limit: 100})
	if err != nil {
		t.Fatalf("list %s: %v", typ, err)
	}
	return len(ts)
}

// TestEnqueueWithEndedContextEnqueuesNothing: an Enqueue whose context has
// already ended returns its error and enqueues nothing. Before, the request
// was queued for the insert loop about half the time (a select between the
// queue and the context), and committed although its caller was told it
// was cancelled.
func TestEnqueueWithEndedContextEnqueuesNothing(t *testing.T) {
	backendtest.Run(t, testEnqueueWithEndedContextEnqueuesNothing)
}

func testEnqueueWithEndedContextEnqueuesNothing(t *testing.T, backend string) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, backend), Config{NoScheduler: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	prio := 0
	const n = 20
	for i := range n {
		_, err := e.Enqueue(ctx, EnqueueRequest{Type: fmt.Sprintf("gone%d", i), Priority: &prio})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("enqueue %d with a cancelled context: %v, want context.Canceled", i, err)
		}
	}
	// The insert loop is first in, first out: once this enqueue is
	// answered, every one queued before it has been committed or dropped.
	if _, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "flush", Priority: &prio}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	for i := range n {
		if c := countOfType(t, e, fmt.Sprintf("gone%d", i)); c != 0 {
			t.Errorf("enqueue %d was told it was cancelled, but its task was stored", i)
		}
	}
}

// TestEnqueueCancelledWhileQueuedIsToldTheTruth: while another session
// holds the database's write lock, the insert loop's commit waits, and
// later enqueues queue behind it. Callers whose contexts end while they
// wait are told exactly what happened: a caller told its enqueue was
// cancelled finds no task, and one whose insert had already been sent
// waits for it and gets its task. Before, every such caller got its
// context's error at once, and its task was inserted anyway once the lock
// was gone: a caller that enqueued again (there is no key) ran the work
// twice, and one that undid its own state on the error left a task behind.
func TestEnqueueCancelledWhileQueuedIsToldTheTruth(t *testing.T) {
	backendtest.Run(t, testEnqueueCancelledWhileQueuedIsToldTheTruth)
}

func testEnqueueCancelledWhileQueuedIsToldTheTruth(t *testing.T, backend string) {
	ls := openLockableStore(t, backend)
	gauge := &insertGauge{Store: ls.Store}
	e := startWorkerEngine(t, gauge, Config{NoScheduler: true, LeaseDuration: time.Minute})
	loops := int64(insertLoops(gauge))
	prio := 0
	if _, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "warm", Priority: &prio}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	unlock := ls.lock(t)
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()

	// Enqueues that wait out the lock hold every insert loop (a store that
	// groups commits gets several), until one of them has to queue. All
	// callers give up while the lock is held. An enqueue in the queue does
	// not by itself show that every loop is held: on a loaded machine a
	// loop that has just taken one may not have drained the queue yet, and
	// would then take the enqueues below with it. Once every loop waits in
	// InsertTasks, none takes anything before the unlock.
	ctx, cancel := context.WithCancel(context.Background())
	var held sync.WaitGroup
	var heldErrs [64]error
	nHeld := 0
	for i := range heldErrs {
		nHeld++
		held.Go(func() {
			_, heldErrs[i] = e.Enqueue(ctx, EnqueueRequest{Type: fmt.Sprintf("held%d", i), Priority: &prio})
		})
		if pollUntil(100*time.Millisecond, func() bool { return gauge.inFlight.Load() == loops && len(e.inserts.ch) > 0 }) {
			break
		}
		if i == len(heldErrs)-1 {
			t.Fatal("no enqueue queued while the write lock was held")
		}
	}
	queued := len(e.inserts.ch)

	// These queue behind them, and their callers give up.
	const n = 20
	var gone sync.WaitGroup
	goneErrs := make([]error, n)
	for i := range n {
		gone.Go(func() {
			_, goneErrs[i] = e.Enqueue(ctx, EnqueueRequest{Type: fmt.Sprintf("gone%d", i), Priority: &prio})
		})
	}
	allQueued := pollUntil(10*time.Second, func() bool { return len(e.inserts.ch) >= queued+n })
	cancel()
	// Callers still queued return at once; those whose insert was sent
	// wait for its commit, so wait for them only after unlocking. When all
	// were queued, they are waited for (10 s at most) before the unlock:
	// on a loaded machine a freed loop could otherwise take a queued call
	// before its caller, woken by the cancel, has run to give it up.
	if allQueued {
		goneDone := make(chan struct{})
		go func() { gone.Wait(); close(goneDone) }()
		select {
		case <-goneDone:
		case <-time.After(10 * time.Second):
		}
	}
	unlock()
	unlocked = true
	gone.Wait()
	held.Wait()
	if _, err := e.Enqueue(context.Background(), EnqueueRequest{Type: "flush", Priority: &prio}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	// told reports whether the enqueue of typ that returned err was told
	// the truth.
	told := func(typ string, err error) bool {
		stored := countOfType(t, e, typ)
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			t.Errorf("enqueue of %s: %v, want success or context.Canceled", typ, err)
		case err != nil && stored != 0:
			t.Errorf("enqueue of %s was told it was cancelled, but its task was stored", typ)
		case err == nil && stored != 1:
			t.Errorf("enqueue of %s succeeded, but %d tasks of it are stored", typ, stored)
		}
		return err == nil
	}
	// The enqueues being inserted when their callers gave up waited for
	// their commit and got their tasks; at least one was.
	inserted := 0
	for i := range nHeld {
		if told(fmt.Sprintf("held%d", i), heldErrs[i]) {
			inserted++
		}
	}
	if inserted == 0 {
		t.Error("no enqueue whose insert was under way when its caller gave up got its task")
	}
	cancelled := 0
	for i := range n {
		if !told(fmt.Sprintf("gone%d", i), goneErrs[i]) {
			cancelled++
		}
	}
	t.Logf("%d of %d held enqueues inserted, %d of %d queued ones cancelled (all queued: %v)", inserted, nHeld, cancelled, n, allQueued)
	if allQueued && cancelled != n {
		t.Errorf("%d of %d enqueues queued behind busy insert loops were cancelled, want all", cancelled, n)
	}
}

// insertGauge counts the InsertTasks calls under way; it passes on the
// backend's GroupCommit, which sets how many insert loops an engine runs.
type insertGauge struct {
	store.Store
	inFlight atomic.Int64
}

func (s *insertGauge) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	return s.Store.InsertTasks(ctx, p)
}

// GroupCommit reports whether the wrapped store groups commits.
func (s *insertGauge) GroupCommit() bool {
	gc, ok := s.Store.(store.GroupCommitter)
	return ok && gc.GroupCommit()
}

// pollUntil polls cond every millisecond until it holds (true) or d has
// passed (false).
func pollUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
