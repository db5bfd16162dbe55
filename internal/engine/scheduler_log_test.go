package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// schedOutageStore fails the scheduler loops' calls (promotion, the
// listing of expired leases, the next wake-up, retention, registry
// pruning) as a database that is away does, while down is set, counting
// each call's failures.
type schedOutageStore struct {
	store.Store
	down                                  atomic.Bool
	promote, expired, wakeup, kept, prune atomic.Int64
}

var errSchedDown = errors.New("database down")

func (s *schedOutageStore) fail(n *atomic.Int64) error {
	if !s.down.Load() {
		return nil
	}
	n.Add(1)
	return errSchedDown
}

func (s *schedOutageStore) PromoteDue(ctx context.Context, p store.PromoteParams) (int, error) {
	if err := s.fail(&s.promote); err != nil {
		return 0, err
	}
	return s.Store.PromoteDue(ctx, p)
}

func (s *schedOutageStore) ExpiredLeases(ctx context.Context, p store.ExpiredParams) ([]store.Task, error) {
	if err := s.fail(&s.expired); err != nil {
		return nil, err
	}
	return s.Store.ExpiredLeases(ctx, p)
}

func (s *schedOutageStore) NextWakeup(ctx context.Context, p store.WakeupParams) (store.Wakeup, error) {
	if err := s.fail(&s.wakeup); err != nil {
		return store.Wakeup{}, err
	}
	return s.Store.NextWakeup(ctx, p)
}

func (s *schedOutageStore) DeleteFinished(ctx context.Context, p store.RetentionParams) (store.RetentionResult, error) {
	if err := s.fail(&s.kept); err != nil {
		return store.RetentionResult{}, err
	}
	return s.Store.DeleteFinished(ctx, p)
}

func (s *schedOutageStore) PruneNodes(ctx context.Context, p store.PruneNodesParams) (int, error) {
	if err := s.fail(&s.prune); err != nil {
		return 0, err
	}
	return s.Store.PruneNodes(ctx, p)
}

// startSchedOutage starts a leading engine over a schedOutageStore whose
// scheduler passes run every 20 ms, retention and pruning with them, and
// returns it with its log. setup runs on the engine before it starts.
func startSchedOutage(t *testing.T, setup ...func(*Engine)) (*Engine, *schedOutageStore, *logBuffer) {
	t.Helper()
	st := &schedOutageStore{Store: newLeaderStore(t).Store}
	logs := &logBuffer{}
	e, err := New(Config{Store: st, NodeID: "sched", Version: "test", LeaderTTL: 2 * time.Second,
		PollInterval: 20 * time.Millisecond, RetentionInterval: MinRetentionInterval,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	for _, f := range setup {
		f(e)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	waitFor(t, "the node to lead", e.IsLeader)
	return e, st, logs
}

// schedCalls names each scheduler call by a word its log lines hold.
func schedCalls(st *schedOutageStore) map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{"due tasks": &st.promote, "expired leases": &st.expired,
		"wake-up": &st.wakeup, "scheduler: retention": &st.kept, "pruning": &st.prune}
}

// linesWith returns the lines of out at level that contain word.
func linesWith(out, level, word string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, word) {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestSchedulerFailuresLoggedOncePerOutage: while the database is away,
// each of the leader's scheduler loops (promotion, reaping, the next
// wake-up, retention, registry pruning) warns at its first failure and
// logs the rest at Debug, and says when its call works again, with how
// many failed and after how long. Each warned at every pass, once per
// poll interval (a second by default), for as long as the outage lasted.
func TestSchedulerFailuresLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	_, st, logs := startSchedOutage(t)
	st.down.Store(true)
	calls := schedCalls(st)
	waitFor(t, "five failures of each scheduler call", func() bool {
		for _, n := range calls {
			if n.Load() < 5 {
				return false
			}
		}
		return true
	})
	st.down.Store(false)
	waitFor(t, "a recovery line for each scheduler call", func() bool {
		out := logs.String()
		for word := range calls {
			if len(linesWith(out, "INFO", word)) == 0 {
				return false
			}
		}
		return true
	})
	out := logs.String()
	for word, n := range calls {
		if w := linesWith(out, "WARN", word); len(w) != 1 {
			t.Errorf("%s: %d warnings for %d failures in one outage, want 1:\n%s", word, len(w), n.Load(), strings.Join(w, ""))
		}
		if d := linesWith(out, "DEBUG", word); len(d) == 0 {
			t.Errorf("%s: the failures after the first are not at Debug", word)
		}
		info := linesWith(out, "INFO", word)
		if len(info) != 1 || !strings.Contains(info[0], " failures=") || !strings.Contains(info[0], " after=") {
			t.Errorf("%s: recovery lines %q, want one with failures and after", word, info)
		}
	}
}

// TestSchedulerFailuresRemindedAtMostOncePerInterval: during a long
// outage each scheduler loop reminds that its call still fails, with how
// many failed and for how long, at most once per reminder interval (a
// minute; shortened here with the leader lease's).
func TestSchedulerFailuresRemindedAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	const every = 300 * time.Millisecond
	_, st, logs := startSchedOutage(t, func(e *Engine) { e.leading.remindEvery = every })
	st.down.Store(true)
	start := time.Now()
	waitFor(t, "two reminders of the promotion's failures", func() bool {
		return len(linesWith(logs.String(), "WARN", "scheduler: promote due tasks still failing")) >= 2
	})
	elapsed := time.Since(start)
	out := logs.String()
	r := linesWith(out, "WARN", "scheduler: promote due tasks still failing")
	if limit := int(elapsed/every) + 1; len(r) > limit {
		t.Fatalf("%d reminders in %s, want at most %d (one per %s):\n%s", len(r), elapsed.Round(time.Millisecond), limit, every, out)
	}
	if !strings.Contains(r[0], " failures=") || !strings.Contains(r[0], " for=") {
		t.Fatalf("a reminder does not say how many failed and for how long: %s", r[0])
	}
	if w := len(linesWith(out, "WARN", "promote")) - len(r); w != 1 {
		t.Fatalf("%d promotion warnings besides the reminders, want 1:\n%s", w, out)
	}
}

// losingLeaderStore is a schedOutageStore whose leader lease renewals
// fail while lose is set, so that the node loses the leadership. The
// others ignore their bound (TTL/4), as a database that is slow, not
// away: two cut off in a row on a loaded machine ended a leadership
// before the test's loss, and one ended between the promotion's failure
// and the reaper's left a second term whose loops stopped while failing
// too (two "promotion stopped" lines).
type losingLeaderStore struct {
	*schedOutageStore
	lose atomic.Bool
}

func (s *losingLeaderStore) AcquireLeader(ctx context.Context, p store.LeaderParams) (store.Lease, error) {
	if s.lose.Load() {
		return store.Lease{}, fmt.Errorf("acquire leader: %w", store.ErrUnavailable)
	}
	return s.schedOutageStore.AcquireLeader(context.WithoutCancel(ctx), p)
}

// TestSchedulerOutageClosedWhenTheLoopsStop: a scheduler loop whose calls
// still fail when the leadership is lost says, as the loops stop, that it
// stopped while still failing, with how many failed and for how long. Its
// outage ended without a line: the last word was the warning.
func TestSchedulerOutageClosedWhenTheLoopsStop(t *testing.T) {
	t.Parallel()
	st := &losingLeaderStore{schedOutageStore: &schedOutageStore{Store: newLeaderStore(t).Store}}
	logs := &logBuffer{}
	e, err := New(Config{Store: st, NodeID: "sched-lost", Version: "test", LeaderTTL: time.Second,
		PollInterval: 20 * time.Millisecond, RetentionInterval: MinRetentionInterval,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	waitFor(t, "the node to lead", e.IsLeader)
	st.down.Store(true)
	waitFor(t, "a warning of the promotion and of the reaping", func() bool {
		out := logs.String()
		return len(linesWith(out, "WARN", "scheduler: promote due tasks failed")) > 0 &&
			len(linesWith(out, "WARN", "scheduler: list expired leases failed")) > 0
	})
	st.lose.Store(true)
	waitFor(t, "the scheduler loops to stop", func() bool { return strings.Contains(logs.String(), "scheduler loops stopped") })
	out := logs.String()
	for _, msg := range []string{"scheduler: promotion stopped while still failing", "scheduler: reaping stopped while still failing"} {
		l := linesWith(out, "INFO", msg)
		if len(l) != 1 || !strings.Contains(l[0], " failures=") || !strings.Contains(l[0], " for=") {
			t.Errorf("%q lines %q, want one with failures and for:\n%s", msg, l, out)
		}
	}
	if l := linesWith(out, "INFO", "works again"); len(l) != 0 {
		t.Errorf("a loop says its calls work again while they still fail: %q", l)
	}
}
