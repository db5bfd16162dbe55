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
// goes to the returned buffer; it is closed when t ends.
func startLoggedLeaderEngine(t *testing.T, st store.Store, node string, ttl time.Duration) (*Engine, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	e, err := New(Config{Store: st, NodeID: node, Version: "test", LeaderTTL: ttl, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("engine: %v", err)
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
	a, _ := startLoggedLeaderEngine(t, st, "node-a", ttl)
	waitFor(t, "node-a to lead", a.IsLeader)
	b, logsB := startLoggedLeaderEngine(t, st, "node-b", ttl)
	waitFor(t, "node-b to log that node-a leads", func() bool {
		return strings.Contains(logsB.String(), `msg="standing by; another node leads" node=node-b leader=node-a`)
	})
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
		return st.Store.AcquireLeader(ctx, p)
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
