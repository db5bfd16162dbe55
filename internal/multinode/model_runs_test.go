package multinode

// What the two randomized model tests, TestEnginesRestartedAtRandom and
// TestEnginesUnderUserOperations, share: the record of every handler run
// and the rule of which run still holds its task's lease, the tasks they
// enqueued and the violations seen while they ran, the frame of their
// final checks, and their scripts' common actions.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// The actions both tests' scripts use, one per attempt (the last one
// repeats); each test adds its own.
const (
	actOK    = "ok"    // succeed (push: 200)
	actFail  = "fail"  // fail transiently (push: 500)
	actPerm  = "perm"  // fail permanently (push: 400)
	actAfter = "after" // fail with a Retry-After (push: 429 with Retry-After)
)

// testSeed returns the seed of a randomized test: the value of the
// environment variable env, else a new one. It logs it, and again if the
// test fails, with how to replay it.
func testSeed(t *testing.T, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, env, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: replay with %s=%d", seed, env, seed)
		}
	})
	return seed
}

// scriptAction returns the action of a script's attempt: attempt 1 is the
// first, and the last action repeats.
func scriptAction(script []string, attempt int) string {
	return script[min(max(attempt, 1), len(script))-1]
}

// scriptedError is an in-process handler's answer for one of the common
// actions, with retryAfter for actAfter; ok is false for any other action.
func scriptedError(action string, retryAfter time.Duration) (err error, ok bool) {
	switch action {
	case actOK:
		return nil, true
	case actFail:
		return retry.Transient(errors.New("scripted failure")), true
	case actPerm:
		return retry.Permanent(retry.WithCode("poison", errors.New("scripted permanent failure"))), true
	case actAfter:
		return retry.RetryAfter(errors.New("scripted 429"), retryAfter), true
	}
	return nil, false
}

// modelRun is one handler run as the handler saw it: an in-process
// handler, a pull worker's lease and report, or a push delivery as the
// target received it.
type modelRun struct {
	task      string
	typ       string
	node      string // "" for a push run: the target cannot tell which node sent it
	pull      bool   // a pull worker's lease and report
	attempt   int
	leaseID   string    // "" for a push run
	startedAt time.Time // the attempt's start as stored (Task.StartedAt; not known to a push target)
	expires   time.Time // the lease's expiry when leased (pull: never extended; not known to a push target)
	action    string
	ctx       context.Context // in process: the handler's context; push: the request's; pull: none to watch
	start     time.Time
	end       time.Time // zero while running
	ctxDone   bool      // the context was done when the run ended
	reported  error     // pull: what Complete or Fail answered
	reporting bool      // pull: Complete or Fail was called: the lease may end before it answers
	used      bool      // matched with a history row by the final check
	epoch     int       // restart test: how often the test had retried the task when the run began
	closing   bool      // restart test: the run's engine began to close while it ran
}

// holdsLease reports whether r, still running, holds a valid lease of its
// task at the instant at, as far as the run itself shows: a pull run until
// its lease expires or it sends its report, whichever comes first (a
// report ends the lease when it commits, which under load may be well
// before its call answers: the retry it decides can be due and leased
// meanwhile); any other run while its context lives (its node believes it
// holds the lease, and heartbeats keep it). Whether the test's own doings
// (a cancel, a cut, a close) ended the lease is the caller's to say.
func (r *modelRun) holdsLease(at time.Time) bool {
	if r.pull {
		return at.Before(r.expires) && !r.reporting
	}
	return r.ctx.Err() == nil
}

// leasedUntil is the lease's expiry as r was leased, for a message ("" when
// the run did not see it).
func (r *modelRun) leasedUntil() string {
	if r.expires.IsZero() {
		return ""
	}
	return " until " + r.expires.Format(time.StampMicro)
}

// unrecorded returns why r, ended and matched with no history row, should
// have had one ("" when it need not): a pull run whose report the store
// accepted, or another run that returned with its context live, unless
// excused says the test's doings may have taken its lease.
func (r *modelRun) unrecorded(excused func(*modelRun) bool) string {
	switch {
	case r.end.IsZero():
		return ""
	case r.pull:
		if r.reported == nil {
			return "its report was accepted"
		}
	case !r.ctxDone && !excused(r):
		return "it returned with its context live"
	}
	return ""
}

// modelBook is what both model tests record while they run: the tasks
// they enqueued, every handler run, the runs still running, the
// violations seen then, and the outcomes the engines logged as not
// recorded. mu guards it and whatever else the test's model keeps beside
// it.
type modelBook struct {
	mu            sync.Mutex
	ids           map[string]int // task id -> script index
	active        map[string][]*modelRun
	runs          map[string][]*modelRun
	violations    []string
	maxViolations int
	// outcomeLost holds the lines in which a node logged an in-process
	// outcome as not recorded (outcomeLog), in the order logged.
	outcomeLost map[outcomeKey][]*lostOutcome
}

// initBook makes b's maps; it keeps the first maxViolations violations.
func (b *modelBook) initBook(maxViolations int) {
	b.ids, b.active, b.runs = map[string]int{}, map[string][]*modelRun{}, map[string][]*modelRun{}
	b.outcomeLost = map[outcomeKey][]*lostOutcome{}
	b.maxViolations = maxViolations
}

// violate notes a violation seen while the test ran. b.mu is held.
func (b *modelBook) violate(format string, args ...any) {
	if len(b.violations) < b.maxViolations {
		b.violations = append(b.violations, fmt.Sprintf(format, args...))
	}
}

// startRun records the start of run r (now) and notes a violation for
// every other run of its task that still holds its lease (holdsLease),
// unless excused says the test's doings may have ended that lease.
// b.mu is held.
func (b *modelBook) startRun(r *modelRun, excused func(o *modelRun) bool) {
	r.start = time.Now()
	for _, o := range b.active[r.task] {
		if excused(o) || !o.holdsLease(r.start) {
			continue
		}
		b.violate("task %s: attempt %d (%s on %q, lease %q) started at %s while attempt %d (%s on %q, lease %q%s, since %s) still held its lease",
			r.task, r.attempt, r.typ, r.node, r.leaseID, r.start.Format(time.StampMicro), o.attempt, o.typ, o.node, o.leaseID,
			o.leasedUntil(), o.start.Format(time.StampMicro))
	}
	b.active[r.task] = append(b.active[r.task], r)
	b.runs[r.task] = append(b.runs[r.task], r)
}

// reports records that a pull run is about to send its report.
func (b *modelBook) reports(r *modelRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.reporting = true
}

// end records the end of a run.
func (b *modelBook) end(r *modelRun, reported error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.end = time.Now()
	r.reported = reported
	if r.ctx != nil {
		r.ctxDone = r.ctx.Err() != nil
	}
	as := b.active[r.task]
	for i := range as {
		if as[i] == r {
			b.active[r.task] = append(as[:i:i], as[i+1:]...)
			break
		}
	}
}

func (b *modelBook) activeRuns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, as := range b.active {
		n += len(as)
	}
	return n
}

// waitRunsEnded waits, after every engine closed, until no handler runs;
// it fails the test after 10 s.
func (b *modelBook) waitRunsEnded(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); b.activeRuns() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d handler runs still running 10s after every engine closed", b.activeRuns())
		}
	}
}

// checkEnqueued fails the test unless it enqueued total tasks.
func (b *modelBook) checkEnqueued(t *testing.T, total int) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ids) != total {
		t.Errorf("%d tasks enqueued, want %d", len(b.ids), total)
	}
}

// reportViolations fails the test with each violation seen while it ran
// and returns the enqueued tasks' ids, sorted. b.mu is held.
func (b *modelBook) reportViolations(t *testing.T) []string {
	t.Helper()
	for _, v := range b.violations {
		t.Error(v)
	}
	ids := make([]string, 0, len(b.ids))
	for id := range b.ids {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// runOf finds the unused run that read a history row's attempt, by its
// number and its start as stored, and marks it used; nil when none did.
func runOf(runs []*modelRun, h store.Attempt) *modelRun {
	for _, r := range runs {
		if !r.used && r.attempt == h.Number && r.startedAt.UnixMicro() == h.StartedAt.UnixMicro() {
			r.used = true
			return r
		}
	}
	return nil
}

// maxFailures is how many failures a final check reports one by one.
const maxFailures = 30

// failures reports a final check's failures: the first maxFailures as
// errors of the test, then how many more there were (flush).
type failures struct {
	t *testing.T
	n int
}

// fail reports one failure.
func (f *failures) fail(format string, args ...any) {
	f.t.Helper()
	f.n++
	if f.n <= maxFailures {
		f.t.Errorf(format, args...)
	}
}

// flush reports how many failures were not reported one by one.
func (f *failures) flush() {
	f.t.Helper()
	if f.n > maxFailures {
		f.t.Errorf("... and %d more", f.n-maxFailures)
	}
}

// histString is a task's history for a failure's message.
func histString(hist []store.Attempt) string {
	s := ""
	for _, a := range hist {
		s += fmt.Sprintf("[#%d %s %s %s-%s d=%s]", a.Number, a.Outcome, a.WorkerID, a.StartedAt.Format(time.StampMicro),
			a.FinishedAt.Format(time.StampMicro), a.Delay)
	}
	return s
}
