package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// startLoggedLeaderEngine starts an engine named node over st whose log
// goes to the returned buffer; it is closed when t ends. The setup
// functions run on the engine before it starts.
func startLoggedLeaderEngine(t *testing.T, st store.Store, node string, ttl time.Duration, setup ...func(*Engine)) (*Engine, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	e, err := New(Config{Store: st, NodeID: node, Version: "test", LeaderTTL: ttl, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
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
	return e, logs
}

// TestStandbyLogsWhoLeads: a standby's log says which node leads when it
// first finds the lease held, and again when the leader changes; a node
// that takes over names the leader it last saw. A standby logged nothing
// about the leadership: on three nodes, the log of the one that did not
// take over after the leader died showed no change at all, and none said
// which node led.
func TestStandbyLogsWhoLeads(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	st := newLeaderStore(t)
	// The lease calls ignore their bound (TTL/4), as a database that is
	// slow, not away: one cut off on a loaded machine was a failed attempt,
	// and node-b, finding node-a again after it, rightly said so again.
	var bCalls atomic.Int64 // node-b's lease calls returned
	st.acquire = func(ctx context.Context, _ int, p store.LeaderParams) (store.Lease, error) {
		l, err := st.commit(ctx, p)
		if LeaseHolderNode(p.NodeID) == "node-b" {
			bCalls.Add(1)
		}
		return l, err
	}
	a, _ := startLoggedLeaderEngine(t, st, "node-a", ttl)
	waitFor(t, "node-a to lead", a.IsLeader)
	b, logsB := startLoggedLeaderEngine(t, st, "node-b", ttl)
	waitFor(t, "node-b to log that node-a leads", func() bool {
		return strings.Contains(logsB.String(), `msg="standing by; another node leads" node=node-b leader=node-a`)
	})
	// Two more attempts find node-a leading, and are not logged again.
	seen := bCalls.Load()
	waitFor(t, "two more attempts of node-b", func() bool { return bCalls.Load() >= seen+2 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node-b to take over", b.IsLeader)
	waitFor(t, "node-b to name the leader it took over from", func() bool {
		return strings.Contains(logsB.String(), `msg="elected leader; starting scheduler loops" node=node-b previous_leader=node-a`)
	})
	if n := strings.Count(logsB.String(), "standing by"); n != 1 {
		t.Errorf("node-b logged %d standby lines for one leader; want 1:\n%s", n, logsB.String())
	}
}

// TestLeaderLogsRenewalRecovered: a leader whose renewal failed logs the
// first renewal that succeeds again, so its log does not end on a failure
// while it still leads.
func TestLeaderLogsRenewalRecovered(t *testing.T) {
	t.Parallel()
	st := newLeaderStore(t)
	var failing atomic.Bool
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		if failing.Load() {
			return store.Lease{}, errors.New("database down")
		}
		return st.Store.AcquireLeader(ctx, p)
	}
	// A TTL of 4 s renews every second and keeps the loops 3 s after a
	// successful renewal: one failed renewal does not end the leadership.
	e, logs := startLoggedLeaderEngine(t, st, "leader", 4*time.Second)
	waitFor(t, "the node to lead", e.IsLeader)
	failing.Store(true)
	waitFor(t, "a failed renewal", func() bool { return strings.Contains(logs.String(), "leader lease renewal failed") })
	failing.Store(false)
	waitFor(t, "the renewal to be logged as working again", func() bool {
		return strings.Contains(logs.String(), `msg="leader lease renewed again" node=leader failed_renewals=`)
	})
	if !e.IsLeader() || strings.Contains(logs.String(), "leadership lost") {
		t.Fatalf("the node lost the leadership over one failed renewal:\n%s", logs.String())
	}
}

// TestLateRenewalIsNotLoggedAsRenewedAgain: a renewal that succeeds after
// a failed one but comes back once the watchdog stopped the loops is a
// lost leadership and a new election, not a renewal that kept it: the log
// says 'leadership lost' and 'elected leader', and not 'leader lease
// renewed again' (which it logged first, before the loss).
func TestLateRenewalIsNotLoggedAsRenewedAgain(t *testing.T) {
	t.Parallel()
	const ttl = time.Second // renewals every 250 ms, safe end 750 ms after one starts
	st := newLeaderStore(t)
	var mode atomic.Int32 // 0 normal, 1 fail the next renewal, 2 slow ones
	st.acquire = func(ctx context.Context, call int, p store.LeaderParams) (store.Lease, error) {
		switch mode.Load() {
		case 1:
			mode.Store(2)
			return store.Lease{}, errors.New("database down")
		case 2:
			// Commits, but answers past the last successful renewal's
			// safe end (its start + 750 ms), within its own.
			l, err := st.commit(ctx, p)
			time.Sleep(400 * time.Millisecond)
			return l, err
		}
		// Ignoring its bound (TTL/4), as a slow database: a renewal cut
		// off on a loaded machine before the test's failure was followed,
		// rightly, by 'renewed again'.
		return st.commit(ctx, p)
	}
	e, logs := startLoggedLeaderEngine(t, st, "late", ttl)
	waitFor(t, "the node to lead", e.IsLeader)
	mode.Store(1)
	waitFor(t, "the leadership lost to the watchdog and taken again", func() bool {
		s := logs.String()
		lost := strings.Index(s, "leadership lost")
		return lost >= 0 && strings.Contains(s[lost:], "elected leader")
	})
	mode.Store(0)
	if s := logs.String(); strings.Contains(s, "renewed again") {
		t.Fatalf("a renewal that came back after the loops stopped was logged as renewed again:\n%s", s)
	}
}

// failingLeaderStore is a leaderStore whose AcquireLeader calls fail while
// down is set, counting them in fails. The others ignore their bound
// (TTL/4), as a database that is slow, not away: on a loaded machine one
// cut off was another outage, warned about, or took the test's outage's
// warning (an outage that comes back within the reminder interval is at
// Debug). begin, when set, says whether the outage may begin at a call:
// until it does, the calls go through although down is set.
func failingLeaderStore(t *testing.T, begin func() bool) (st *leaderStore, down *atomic.Bool, fails *atomic.Int64) {
	st = newLeaderStore(t)
	down, fails = new(atomic.Bool), new(atomic.Int64)
	st.acquire = func(ctx context.Context, _ int, p store.LeaderParams) (store.Lease, error) {
		if down.Load() && (fails.Load() > 0 || begin == nil || begin()) {
			fails.Add(1)
			return store.Lease{}, errors.New("database down")
		}
		return st.commit(ctx, p)
	}
	return st, down, fails
}

// leaseFailureLines counts the log's warnings about failed leader lease
// renewals and attempts.
func leaseFailureLines(out string) int {
	n := 0
	for line := range strings.Lines(out) {
		if strings.Contains(line, "level=WARN") && (strings.Contains(line, "leader lease renewal") || strings.Contains(line, "leader lease attempt")) {
			n++
		}
	}
	return n
}

// TestLeaderLeaseFailuresLoggedOncePerOutage: a leader whose renewals keep
// failing, and goes on failing as a standby once its lease's safe end has
// passed, warns once for the outage, not once per attempt (every TTL/4, as
// long as the database is away); so does a standby whose attempts fail.
// The attempts in between are at Debug.
func TestLeaderLeaseFailuresLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	const ttl = time.Second // an attempt every 250 ms
	// The outage begins at a renewal: a lease call made while the node
	// leads (its role is set by the goroutine making the calls, and cleared
	// by it or by the watchdog). A renewal that came back past its safe end
	// on a loaded machine could leave the node a standby when the database
	// went away.
	var node atomic.Pointer[Engine]
	st, down, fails := failingLeaderStore(t, func() bool { return node.Load().IsLeader() })
	e, logs := startLoggedLeaderEngine(t, st, "outage-leader", ttl, func(e *Engine) { node.Store(e) })
	waitFor(t, "the node to lead", e.IsLeader)
	standby := &leaderStore{Store: st.Store}
	sdown := new(atomic.Bool)
	sfails := new(atomic.Int64)
	standby.acquire = func(ctx context.Context, _ int, p store.LeaderParams) (store.Lease, error) {
		if sdown.Load() {
			sfails.Add(1)
			return store.Lease{}, errors.New("database down")
		}
		return standby.commit(ctx, p) // slow, not away: as failingLeaderStore's
	}
	b, blogs := startLoggedLeaderEngine(t, standby, "outage-standby", ttl)
	waitFor(t, "the standby to see the leader", func() bool { return strings.Contains(blogs.String(), "standing by") })

	down.Store(true)
	sdown.Store(true)
	waitFor(t, "eight failed attempts on each node", func() bool { return fails.Load() >= 8 && sfails.Load() >= 8 })
	if e.IsLeader() {
		t.Fatalf("the leader still leads %d failed renewals later", fails.Load())
	}
	// The lines after the outage are looked for past its start in the
	// logs, not counted from their beginning: a renewal that came back
	// late on a loaded machine may have ended a leadership before.
	mark, bmark := len(logs.String()), len(blogs.String())
	down.Store(false)
	waitFor(t, "the node to lead again", func() bool { return strings.Contains(logs.String()[mark:], "elected leader") })
	sdown.Store(false)
	waitFor(t, "the standby to see the leader again", func() bool { return strings.Contains(blogs.String()[bmark:], "standing by") })
	if b.IsLeader() {
		t.Fatal("the standby leads")
	}
	out := logs.String()
	if n := leaseFailureLines(out); n != 1 {
		t.Errorf("the leader warned %d times for %d failed attempts in one outage, want once:\n%s", n, fails.Load(), out)
	}
	if !strings.Contains(out, `level=WARN msg="leader lease renewal failed" node=outage-leader`) {
		t.Errorf("the leader's first failed renewal is not a warning:\n%s", out)
	}
	bout := blogs.String()
	if n := leaseFailureLines(bout); n != 1 {
		t.Errorf("the standby warned %d times for %d failed attempts in one outage, want once:\n%s", n, sfails.Load(), bout)
	}
	if !strings.Contains(bout, `level=WARN msg="leader lease attempt failed" node=outage-standby`) {
		t.Errorf("the standby's first failed attempt is not a warning:\n%s", bout)
	}
}

// TestLeaderLeaseFailuresRemindedAtMostOncePerInterval: during a long
// outage the node reminds that its attempts still fail, with how many
// failed and for how long, at most once per reminder interval (a minute;
// shortened here).
func TestLeaderLeaseFailuresRemindedAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	const (
		ttl   = time.Second // an attempt every 250 ms
		every = 600 * time.Millisecond
	)
	st, down, fails := failingLeaderStore(t, nil)
	e, logs := startLoggedLeaderEngine(t, st, "long-outage", ttl, func(e *Engine) { e.leading.remindEvery = every })
	waitFor(t, "the node to lead", e.IsLeader)
	start := time.Now() // before the first failure, which is before every reminder
	down.Store(true)
	// Only the lease's reminders: the scheduler loops, stopped when the
	// leadership is lost, log "... stopped while still failing" once each.
	// A reminder is of a renewal when the node still leads at its time (its
	// calls delayed on a loaded machine past the first warning's interval
	// before the lease's safe end), else of an attempt.
	reminders := func(out string) int {
		return strings.Count(out, `msg="leader lease attempt still failing"`) + strings.Count(out, `msg="leader lease renewal still failing"`)
	}
	waitFor(t, "two reminders", func() bool { return reminders(logs.String()) >= 2 })
	out := logs.String()
	elapsed := time.Since(start) // after every line counted was logged
	n := reminders(out)
	if limit := int(elapsed/every) + 1; n > limit {
		t.Fatalf("%d reminders in %s, want at most %d (one per %s):\n%s", n, elapsed.Round(time.Millisecond), limit, every, out)
	}
	if !strings.Contains(out, `level=WARN msg="leader lease attempt still failing" node=long-outage failures=`) || !strings.Contains(out, " for=") {
		t.Fatalf("a reminder does not say how many attempts failed and for how long:\n%s", out)
	}
	if n := leaseFailureLines(out) - n; n != 1 {
		t.Fatalf("%d warnings besides the reminders for %d failed attempts, want 1:\n%s", n, fails.Load(), out)
	}
}
