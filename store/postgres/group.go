package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/store"
)

// Group commit.
//
// Inserts (without idempotency keys) and outcome batches go to one writer
// goroutine, which sends every such write queued at that moment as one
// pgx batch: one round trip and one implicit transaction, so one WAL flush
// for all of them. Concurrent producers enqueueing one task each and the
// outcome batches of the handlers running those tasks thus share a commit
// instead of paying one each (PostgreSQL's own group commit only merges
// flushes that happen to overlap).
//
// A statement that fails aborts the whole implicit transaction, so nothing
// of the group was applied: the writer then runs each write of the group
// alone, and only the faulty one fails. Any other error (a lost connection,
// when the commit may or may not have happened) is returned to every write
// of the group, as it would have been to each alone.
//
// After a group holding k inserts, while q more writes queued up, the
// writer yields the processor (timers are far coarser than this wait) until
// q+k writes are queued or groupLinger has passed: callers that
// each wait for their own commit come straight back, and without the wait
// they would split into two halves that alternate, each waiting for two
// commits. An idle store, a lone caller or a group without inserts never
// lingers.
//
// A group with inserts leaves outcome batches out for a while
// (store.Holder): the producers wait for their commit, the handlers do not
// wait for theirs.

// maxGroupWrites bounds the writes sent as one batch.
const maxGroupWrites = 64

// groupLinger bounds how long the writer waits for callers to come back.
const groupLinger = 200 * time.Microsecond

// groupWrite is one queued write: either an insert (ins, whose inserted
// tasks go to got), merged with the group's other inserts into one
// statement, or the statements it adds to the batch (queue) and the reader
// of their results, in order (read).
type groupWrite struct {
	ctx    context.Context
	ins    insertRows
	got    func([]store.Task)
	queue  func(b *pgx.Batch)
	read   func(br pgx.BatchResults) error
	notify bool // wake fetchers when the write commits
	// outcome marks an outcome batch, which may be held back from groups
	// with inserts (store.Holder).
	outcome bool
	// locks are the ids of the existing task rows the write updates;
	// sorted reports that its statements lock them in id order.
	locks  []string
	sorted bool
	done   chan error
}

// writeQueue is the writer's queue. A mutex-guarded slice rather than a
// channel, so that a write submitted while the store closes is refused
// instead of being left unanswered.
type writeQueue struct {
	mu      sync.Mutex
	items   []*groupWrite
	stopped bool
	signal  chan struct{} // capacity 1: "the queue is not empty"
}

func (q *writeQueue) push(w *groupWrite) bool {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, w)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

func (q *writeQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// take removes up to n writes, re-signalling when more are left.
func (q *writeQueue) take(n int) []*groupWrite {
	q.mu.Lock()
	k := min(n, len(q.items))
	out := make([]*groupWrite, k)
	copy(out, q.items)
	q.items = append(q.items[:0], q.items[k:]...)
	left := len(q.items)
	q.mu.Unlock()
	if left > 0 {
		select {
		case q.signal <- struct{}{}:
		default:
		}
	}
	return out
}

// stop refuses further writes and returns those still queued.
func (q *writeQueue) stop() []*groupWrite {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	out := q.items
	q.items = nil
	return out
}

// GroupCommit reports that concurrent writes share transactions.
func (s *Store) GroupCommit() bool { return true }

// GroupStats implements store.GroupCounter. Fetches and other writes that
// do not go through the writer are not counted.
func (s *Store) GroupStats() store.GroupStats {
	return store.GroupStats{Groups: s.groups.Load(), Writes: s.groupWrites.Load()}
}

// groupWrite queues w for the writer and waits for its commit. Once queued,
// a write is always answered (by its group's commit, or with ErrClosed). A
// caller whose ctx ends stops waiting: a write still queued is then
// skipped, one already sent commits or fails regardless (and a group whose
// callers all stopped waiting is given up, see groupContext).
func (s *Store) groupWrite(ctx context.Context, op string, w *groupWrite) error {
	if err := s.check(op); err != nil {
		return err
	}
	w.ctx, w.done = ctx, make(chan error, 1)
	if !s.wq.push(w) {
		return translate(op, store.ErrClosed)
	}
	select {
	case err := <-w.done:
		return translate(op, err)
	case <-ctx.Done():
		return translate(op, ctx.Err())
	}
}

// writer is the goroutine that sends the queued writes in groups.
func (s *Store) writer() {
	defer s.bgWG.Done()
	var hold store.Holder[*groupWrite]
	want := 0 // writes expected back: queued during the last commit plus the inserters it answered
	for {
		if hold.Held() {
			// Never wait while holding writes: take what is queued (if
			// anything) and send the held writes with it.
			select {
			case <-s.wq.signal:
			default:
			}
		} else {
			select {
			case <-s.wq.signal:
			case <-s.bgCtx.Done():
			}
		}
		if s.bgCtx.Err() != nil {
			// Closed: whatever is held or queued was never sent. (Checked
			// after the select, which may pick the queue's signal although
			// the store closed too.)
			for _, w := range append(hold.Release(nil), s.wq.stop()...) {
				w.done <- store.ErrClosed
			}
			return
		}
		if want > 1 {
			store.YieldUntil(func() bool { return s.wq.len() >= want }, groupLinger)
		}
		group := hold.Split(s.wq.take(maxGroupWrites), time.Now(), isInsert, isOutcome)
		if len(group) == 0 {
			want = 0
			continue
		}
		want = store.LingerTarget(group, s.runGroup(group), isInsert)
	}
}

func isInsert(w *groupWrite) bool  { return len(w.ins) > 0 }
func isOutcome(w *groupWrite) bool { return w.outcome }

// insertedRows returns how many task rows the writes of ws insert once
// committed: a group's insert takes every row or fails (sendGroup).
func insertedRows(ws []*groupWrite) int64 {
	var n int64
	for _, w := range ws {
		n += int64(len(w.ins))
	}
	return n
}

// runGroup commits group and answers its writes. It returns how many
// writes were queued when the commit came back.
func (s *Store) runGroup(group []*groupWrite) int {
	live := group[:0:0]
	for _, w := range group {
		if err := w.ctx.Err(); err != nil {
			w.done <- err
			continue
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return s.wq.len()
	}
	err := s.sendGroup(live)
	queued := s.wq.len()
	if err != nil && len(live) > 1 && groupUndone(err) {
		// A statement failed and the transaction rolled back, or the batch
		// was never sent: find the faulty write by running each alone.
		for _, w := range live {
			if err := w.ctx.Err(); err != nil { // its caller stopped waiting meanwhile
				w.done <- err
				continue
			}
			err := s.sendGroup([]*groupWrite{w})
			s.count(1, 1)
			if isInsert(w) { // before answering: a caller may Ping next
				s.noteInsert(insertedRows([]*groupWrite{w}), err)
			} else {
				s.noteWrite(err)
			}
			w.done <- err
		}
		return queued
	}
	s.count(1, len(live))                    // before the answers: a caller may read the counters next
	if slices.ContainsFunc(live, isInsert) { // and Ping
		s.noteInsert(insertedRows(live), err)
	} else {
		s.noteWrite(err)
	}
	for _, w := range live {
		w.done <- err
	}
	return queued
}

// groupUndone reports whether err left a group without effect, so that its
// writes may run again one by one: a statement failed (the transaction
// rolled back), pgx could not build the batch (a parameter it cannot
// encode), or the error came before anything was sent. After other errors,
// a lost connection above all, the commit may have happened.
func groupUndone(err error) bool {
	var pgErr *pgconn.PgError
	var prep pgx.ErrPreprocessingBatch
	return errors.As(err, &pgErr) || errors.As(err, &prep) || pgconn.SafeToRetry(err)
}

// count adds to the GroupStats counters.
func (s *Store) count(groups, writes int) {
	s.groups.Add(int64(groups))
	s.groupWrites.Add(int64(writes))
}

// groupContext returns the context a group is sent with: it ends when the
// store closes or when every write's caller has stopped waiting. A group
// that nobody waits for any more is given up like a call whose context
// ended (it commits or not), so that a dead connection (a network path cut
// without a reset, which the kernel takes many minutes to notice) or a long
// lock wait holds up the writes queued behind it only as long as its
// callers are willing to wait, not until the store closes.
func (s *Store) groupContext(ws []*groupWrite) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.bgCtx)
	var waiting atomic.Int64
	waiting.Store(int64(len(ws)))
	stops := make([]func() bool, len(ws))
	for i, w := range ws {
		stops[i] = context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// sendGroup sends the writes as one batch and reads the results: first one
// INSERT for all the inserts of the group, then the other writes'
// statements in order. The batch ends when every write's caller stopped
// waiting (groupContext).
func (s *Store) sendGroup(ws []*groupWrite) error {
	ctx, cancel := s.groupContext(ws)
	defer cancel()
	b := &pgx.Batch{}
	var (
		inserters []*groupWrite
		parts     []insertRows
		rows      int
	)
	// The wake-up names the types of the inserted tasks made due, unless
	// another write of the group wakes for any type.
	notify, notifyAll := false, false
	for _, w := range ws {
		if isInsert(w) {
			inserters, parts = append(inserters, w), append(parts, w.ins)
			rows += len(w.ins)
			notify = notify || w.ins.wake()
		}
	}
	if rows > 0 {
		sql, args := insertStatement(parts, rows)
		b.Queue(sql, args...)
	}
	locks := groupLocks(ws)
	if locks != nil {
		b.Queue(lockTasksSQL, locks)
	}
	for _, w := range ws {
		if !isInsert(w) {
			w.queue(b)
			notifyAll = notifyAll || w.notify
		}
	}
	switch {
	case notifyAll:
		s.queueNotify(b, "")
	case notify:
		s.queueNotify(b, duePayload(parts...))
	}
	br := s.pool.SendBatch(ctx, b)
	err := func() error {
		if rows > 0 {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			if n := tag.RowsAffected(); n != int64(rows) {
				// Only a taken idempotency key skips a row, and keyed
				// inserts do not come here.
				return fmt.Errorf("inserted %d of %d tasks: %w", n, rows, store.ErrConflict)
			}
			for _, w := range inserters {
				ts := make([]store.Task, len(w.ins))
				for i := range ts {
					ts[i] = w.ins[i].task()
				}
				w.got(ts)
			}
		}
		if locks != nil {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for _, w := range ws {
			if !isInsert(w) {
				if err := w.read(br); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && errors.Is(err, context.Canceled) && s.bgCtx.Err() != nil {
		// Close cut the batch off: its callers, whose own contexts are
		// live, learn that the store closed, not that they were cancelled.
		return store.ErrClosed
	}
	return err
}

// lockTasksSQL locks task rows in id order, the order every other
// statement that locks several tasks (outcome batches, ExtendLeases) takes
// them in.
const lockTasksSQL = `SELECT 1 FROM tasks WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`

// groupLocks returns the task ids to lock first, in one statement, when the
// group's writes would otherwise lock existing rows out of id order: two or
// more writes that lock rows (each sorted, but not together), or one whose
// statements are not sorted. Without it, a group could lock t9 (one
// outcome batch) and then t2 (the next) while a heartbeat that locked t2
// waits for t9: a deadlock that PostgreSQL breaks after a second by
// aborting one side. It returns nil when no such statement is needed,
// which is the common case (one outcome batch per group).
func groupLocks(ws []*groupWrite) []string {
	n, sorted := 0, true
	for _, w := range ws {
		if len(w.locks) > 0 {
			n++
			sorted = sorted && w.sorted
		}
	}
	if n == 0 || (n == 1 && sorted) {
		return nil
	}
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.locks...)
	}
	return ids
}
