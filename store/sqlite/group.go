package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/store"
)

// Group commit.
//
// Every write goes to one writer goroutine, which runs every write queued at
// that moment in a single transaction, each in its own SAVEPOINT, and
// commits once. A write whose fn fails is rolled back to its savepoint
// alone; the others commit. So concurrent enqueues, fetches, outcomes and
// heartbeats share one fsync instead of paying one each.
//
// Two refinements matter when many callers each wait for their own commit
// (producers enqueueing one task at a time):
//
//   - Linger. Callers answered by one commit usually come straight back
//     with their next write, but not before the writer has started the next
//     group with whoever was already queued: the callers then split into
//     two alternating halves and each waits for two commits. So after a
//     group holding k inserts, while q more writes queued up, the writer
//     yields the processor (it does not sleep: timers are far coarser than
//     the wait) until q+k writes are queued or lingerMax has passed
//     (store.LingerTarget). An idle store, a lone caller or a group without
//     inserts never lingers.
//   - Outcomes held. A group with inserts leaves outcome batches out for a
//     while (store.Holder): the producers wait for their commit, the
//     handlers do not wait for theirs.
//   - Merged inserts. The InsertTasks writes of a group run as one
//     multi-row INSERT (and one idempotency-key lookup) in one savepoint;
//     should that fail, the savepoint is rolled back and each runs alone, so
//     one bad write still cannot fail the others.

// maxGroup bounds how many writes share one transaction.
const maxGroup = 64

// lingerMax bounds how long the writer waits for callers to come back.
const lingerMax = 50 * time.Microsecond

// writeReq is one queued write.
type writeReq struct {
	ctx context.Context
	// state is reqQueued until the writer claims the write for a
	// transaction (reqTaken) or its caller, whose ctx ended first, gives it
	// up (reqAbandoned): a caller is never told its write was cancelled
	// after it ran.
	state atomic.Int32
	fn    func(ctx context.Context, tx *sql.Tx) error
	ins   *insertJob // set for InsertTasks writes, which can be merged
	// outcome marks an outcome batch, which may be held back from groups
	// with inserts (store.Holder).
	outcome bool
	// probe marks Ping's try of an enqueue-sized write (probeRoom).
	probe bool
	done  chan error
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// claim is called by the writer once the write's transaction has begun:
// it returns nil if the write is to run, else the reason it is skipped
// (its caller's context ended).
func (r *writeReq) claim() error {
	if err := r.ctx.Err(); err != nil {
		r.state.CompareAndSwap(reqQueued, reqAbandoned)
		return err
	}
	if !r.state.CompareAndSwap(reqQueued, reqTaken) {
		return context.Canceled // abandoned just now; its caller has returned
	}
	return nil
}

// run runs the write's fn in tx with a context that is never cancelled
// (see write). A panic in fn fails this write alone (its savepoint is
// rolled back like any failed write's) instead of ending the writer
// goroutine, and with it the process, with every other write of the group.
func (r *writeReq) run(tx *sql.Tx) error {
	return runGuarded(func() error { return r.fn(context.WithoutCancel(r.ctx), tx) })
}

// runGuarded calls fn and returns its error, or an error naming the panic
// (with its stack, for the log) when fn panics.
func runGuarded(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("run write: panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}

func isInsert(r *writeReq) bool  { return r.ins != nil }
func isOutcome(r *writeReq) bool { return r.outcome }

// GroupCommit reports that concurrent writes share transactions.
func (s *Store) GroupCommit() bool { return true }

// GroupStats implements store.GroupCounter.
func (s *Store) GroupStats() store.GroupStats {
	return store.GroupStats{Groups: s.groups.Load(), Writes: s.groupWrites.Load()}
}

// write runs fn in a write transaction on the writer connection and returns
// once that transaction committed (or fn failed).
//
// fn receives a context that is never cancelled: interrupting a statement
// inside a shared transaction would roll back the other writers' work. A
// caller whose ctx ends while it is still queued is skipped.
func (s *Store) write(ctx context.Context, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.submit(ctx, op, &writeReq{fn: fn})
}

// submit queues req and waits for its transaction. Once queued, a write is
// always answered: by its group's commit, or with ErrClosed when the store
// closes first (the writer keeps draining until no submit is in flight).
func (s *Store) submit(ctx context.Context, op string, req *writeReq) error {
	s.submitting.Add(1) // before check: see writer
	if err := s.check(op); err != nil {
		s.submitting.Add(-1)
		return err
	}
	req.ctx, req.done = ctx, make(chan error, 1)
	select {
	case s.writeCh <- req:
		s.submitting.Add(-1)
	case <-ctx.Done():
		s.submitting.Add(-1)
		return s.translate(op, ctx.Err())
	case <-s.stopWriter:
		s.submitting.Add(-1)
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	}
	select {
	case err := <-req.done:
		return s.translate(op, err)
	case <-ctx.Done():
		// Still queued (the writer may be waiting for a lock another
		// process holds): give the write up and return at once. Once the
		// writer has claimed it, wait for its transaction.
		if req.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return s.translate(op, ctx.Err())
		}
		return s.translate(op, <-req.done)
	}
}

// writer is the single goroutine that owns the write connection.
func (s *Store) writer() {
	defer close(s.writerDone)
	var hold store.Holder[*writeReq]
	batch := make([]*writeReq, 0, maxGroup)
	want := 0 // writes expected back: queued during the last commit plus the inserters it answered
	for {
		batch = batch[:0]
		if hold.Held() {
			// Never wait while holding writes: take what is queued (if
			// anything) and send the held writes with it.
			select {
			case r := <-s.writeCh:
				batch = append(batch, r)
			case <-s.stopWriter:
				for _, r := range hold.Release(nil) {
					r.done <- store.ErrClosed
				}
				s.drainClosed()
				return
			default:
			}
		} else {
			select {
			case r := <-s.writeCh:
				batch = append(batch, r)
			case <-s.stopWriter:
				s.drainClosed()
				return
			}
		}
		if want > 1 {
			store.YieldUntil(func() bool { return len(s.writeCh) >= want-len(batch) }, lingerMax)
		}
	drain:
		for len(batch) < maxGroup {
			select {
			case r := <-s.writeCh:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		group := hold.Split(batch, time.Now(), isInsert, isOutcome)
		if len(group) == 0 {
			want = 0
			continue
		}
		s.commitGroup(group)
		want = store.LingerTarget(group, s.queuedAtReply, isInsert)
		s.stmtMu.Lock()
		queued := len(s.toPrepare) > 0
		s.stmtMu.Unlock()
		if queued {
			s.prepareQueued(context.Background())
		}
	}
}

// drainClosed answers everything queued with ErrClosed, until no submit is
// in flight: a submit that had not yet seen the store closed counted
// itself in submitting first, so it is either drained here or sees the
// closed flag.
func (s *Store) drainClosed() {
	for i := 0; i < 1<<24; i++ { // bound: in-flight submits end within microseconds
		select {
		case r := <-s.writeCh:
			r.done <- store.ErrClosed
			continue
		default:
		}
		if s.submitting.Load() == 0 && len(s.writeCh) == 0 {
			return
		}
		runtime.Gosched()
	}
}

// commitGroup runs a group of writes in one transaction and replies to each.
func (s *Store) commitGroup(batch []*writeReq) {
	bg := context.Background()
	errs := make([]error, len(batch))
	committed := false
	roomy := false // the transaction committed an enqueue-sized write (see tookRoom)
	reply := func(commitErr error) {
		s.queuedAtReply = len(s.writeCh)
		// Count before answering: a caller may read the counters next.
		s.groups.Add(1)
		s.groupWrites.Add(int64(len(batch)))
		for i := range batch {
			if errs[i] == nil {
				errs[i] = commitErr
			}
		}
		s.explainIOErrs(errs)
		s.noteWrite(committed && roomy, committed, errs) // before answering: a caller may Ping next
		for i, r := range batch {
			r.done <- errs[i]
		}
	}
	commit := func(tx *sql.Tx) {
		roomy = s.full.Load() != nil && tookRoom(batch, errs)
		err := tx.Commit()
		committed = err == nil
		reply(err)
	}
	// Refuse to write to a file no one will find again (see sameFiles):
	// one stat of each file per transaction.
	if err := s.sameFiles(); err != nil {
		reply(err)
		return
	}
	tx, err := s.w.BeginTx(bg, nil)
	if err != nil {
		reply(err)
		return
	}
	if len(batch) == 1 { // the common idle case: no savepoint needed
		r := batch[0]
		if err := r.claim(); err != nil {
			errs[0] = err
		} else if errs[0] = r.run(tx); errs[0] == nil {
			commit(tx)
			return
		}
		_ = tx.Rollback() // the error is the write's own, already in errs
		reply(nil)
		return
	}
	// fail ends the transaction after a savepoint command failed: nobody's
	// work survives. A write that failed on its own keeps its error; the
	// others get err as store.ErrUnavailable: their work was lost with the
	// transaction (SQLite rolls it back whole on some errors of a
	// statement, and the savepoint is then gone), and the call may be
	// retried.
	fail := func(err error) {
		_ = tx.Rollback() // err says what went wrong
		lost := s.translate("run write group", err)
		if !errors.Is(lost, store.ErrUnavailable) {
			lost = fmt.Errorf("%w: %w", store.ErrUnavailable, lost)
		}
		for j := range errs {
			if errs[j] == nil {
				errs[j] = lost
			}
		}
		reply(nil)
	}
	ran := 0
	done := make([]bool, len(batch))
	for i, r := range batch {
		if err := r.claim(); err != nil {
			errs[i], done[i] = err, true
		}
	}
	merged, err := s.mergeInserts(bg, tx, batch, done)
	if err != nil {
		fail(err)
		return
	}
	ran += merged
	for i, r := range batch {
		if done[i] {
			continue
		}
		if _, err := tx.ExecContext(bg, "SAVEPOINT w"); err != nil {
			fail(err)
			return
		}
		if errs[i] = r.run(tx); errs[i] != nil {
			if _, err := tx.ExecContext(bg, "ROLLBACK TO w"); err != nil {
				fail(fmt.Errorf("roll back a write that failed (%s): %w", errs[i].Error(), err)) // its sentinels are its own
				return
			}
		} else {
			ran++
		}
		if _, err := tx.ExecContext(bg, "RELEASE w"); err != nil {
			fail(err)
			return
		}
	}
	if ran == 0 {
		_ = tx.Rollback() // the error is the write's own, already in errs
		reply(nil)
		return
	}
	commit(tx)
}

// mergeInserts runs the group's pending InsertTasks writes as one, in one
// savepoint, and marks them done. It returns how many it ran; 0 when there
// were fewer than two or the merged insert failed (its savepoint is then
// rolled back and each runs alone). An error means the transaction is
// unusable.
func (s *Store) mergeInserts(ctx context.Context, tx *sql.Tx, batch []*writeReq, done []bool) (int, error) {
	var jobs []*insertJob
	var idx []int
	for i, r := range batch {
		if !done[i] && r.ins != nil {
			jobs, idx = append(jobs, r.ins), append(idx, i)
		}
	}
	if len(jobs) < 2 {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT m"); err != nil {
		return 0, err
	}
	if insErr := runGuarded(func() error { return s.insertJobs(ctx, tx, jobs) }); insErr != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO m"); err != nil {
			return 0, fmt.Errorf("roll back merged inserts that failed (%s): %w", insErr.Error(), err) // their sentinels are their own
		}
		_, err := tx.ExecContext(ctx, "RELEASE m")
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE m"); err != nil {
		return 0, err
	}
	for _, i := range idx {
		done[i] = true
	}
	return len(jobs), nil
}

// explainIOErrs adds ErrDiskFull (and store.ErrUnavailable) to the errors
// of a write transaction that are SQLite I/O errors caused by a lack of
// space (see spaceShortage), with the cause: SQLite reports a write past
// the file size limit (EFBIG), or a -shm file that cannot grow, as a plain
// "disk I/O error". The files and the file system are looked at once per
// transaction, and only when it failed so.
func (s *Store) explainIOErrs(errs []error) {
	asked, why := false, ""
	for i, err := range errs {
		if err == nil || !isIOErr(err) || errors.Is(err, ErrDiskFull) { // nil first: isIOErr allocates
			continue
		}
		if !asked {
			asked, why = true, spaceShortage([]string{s.files[0], s.files[1], s.files[0] + "-shm"})
		}
		if why == "" {
			return
		}
		if errors.Is(err, store.ErrUnavailable) {
			errs[i] = fmt.Errorf("%w: %w: %s", ErrDiskFull, err, why)
		} else {
			errs[i] = fmt.Errorf("%w: %w: %w: %s", store.ErrUnavailable, ErrDiskFull, err, why)
		}
	}
}

// tookRoom reports whether a write of batch that ran (its error nil) is
// one that a full disk refuses: an insert that added a task row, or Ping's
// probe of one (probeRoom). Only the commit of such a write ends a disk
// full: a fetch or promotion with nothing due writes no page, and a small
// update (the node heartbeat, an outcome, a lease extension) may commit in
// the room the WAL already has while every enqueue is refused.
func tookRoom(batch []*writeReq, errs []error) bool {
	for i, r := range batch {
		if errs[i] != nil {
			continue
		}
		if r.probe {
			return true
		}
		if r.ins != nil {
			for _, res := range r.ins.results {
				if !res.Duplicate {
					return true
				}
			}
		}
	}
	return false
}

// noteWrite records how a write transaction ended, for Ping: roomy (it
// committed an insert or Ping's probe: see tookRoom) clears a full disk,
// committed (any write) a lock held by another process; a transaction that failed with
// SQLITE_FULL or ErrDiskFull (in a statement, a savepoint or its commit)
// sets the first, one that failed with SQLITE_BUSY (the busy timeout run
// out) the second. Other failures change nothing.
func (s *Store) noteWrite(roomy, committed bool, errs []error) {
	if roomy && s.full.Load() != nil {
		s.full.Store(nil)
	}
	if committed {
		if s.busy.Load() != nil {
			s.busy.Store(nil)
		}
		return
	}
	for _, err := range errs {
		switch {
		case isFull(err), errors.Is(err, ErrDiskFull):
			if !errors.Is(err, ErrDiskFull) { // not yet translated
				err = fmt.Errorf("%w: %w: %w", store.ErrUnavailable, ErrDiskFull, err)
			}
			s.full.Store(&err)
			return
		case isBusy(err):
			if !errors.Is(err, store.ErrUnavailable) { // not yet translated
				err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
			}
			s.busy.Store(&err)
			return
		}
	}
}

// pingProbeID is the id of the task row Ping's probe inserts and deletes
// (probeRoom): no task has it, as a task id holds no NUL byte.
const pingProbeID = "\x00retryq ping probe"

// probePayload is the payload of the probe's row: a task of a typical
// size, on a leaf page with the others, as most enqueues are.
var probePayload = []byte(`{"probe":"` + strings.Repeat("x", 1000) + `"}`)

// probeRoom tries, while a full disk is marked, whether an enqueue could
// commit now: it inserts a task row of a typical size and deletes it in
// one write transaction, so that no reader ever sees it, and that
// transaction's commit needs the room an enqueue's does (the pages of the
// tasks table and its indexes written to the WAL). It commits, and ends
// the mark, or fails as the enqueue would. It runs only on Ping while the
// mark is set, never on the write path.
func (s *Store) probeRoom(ctx context.Context) error {
	return s.submit(ctx, "ping sqlite: try an enqueue-sized write", &writeReq{probe: true, fn: func(ctx context.Context, tx *sql.Tx) error {
		job := &insertJob{now: time.Now(), tasks: []store.NewTask{{ID: pingProbeID, Type: pingProbeID, MaxAttempts: 1, Payload: probePayload}}}
		if err := s.insertJobs(ctx, tx, []*insertJob{job}); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM tasks WHERE id = ?`, pingProbeID)
		return err
	}})
}
