package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// retentionLog is a store whose DeleteFinished results are observed.
type retentionLog struct {
	store.Store
	mu     sync.Mutex
	passes []store.RetentionResult
}

func (s *retentionLog) DeleteFinished(ctx context.Context, p store.RetentionParams) (store.RetentionResult, error) {
	res, err := s.Store.DeleteFinished(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.passes = append(s.passes, res)
		s.mu.Unlock()
	}
	return res, err
}

func (s *retentionLog) deleted() (passes []store.RetentionResult, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.passes {
		total += r.Succeeded + r.Cancelled + r.Dead
	}
	return append([]store.RetentionResult(nil), s.passes...), total
}

// TestRetentionDeletesABacklogInSmallTransactions: a backlog of finished
// tasks is deleted in transactions of at most retentionBatch tasks a
// class, passes following one another at once, and every deletion is
// counted. A retention transaction holds SQLite's single writer, which
// every enqueue, fetch, heartbeat and outcome waits for: 10,000 tasks a
// class (the former batch) held it for 5 s on the development VM with 2 KB
// payloads and four attempts a task, and on PostgreSQL a batch that
// outlasts the scheduler's call bound (the leader TTL) is rolled back on
// every pass, so that retention would never get through.
func TestRetentionDeletesABacklogInSmallTransactions(t *testing.T) {
	backendtest.Run(t, testRetentionDeletesABacklogInSmallTransactions)
}

func testRetentionDeletesABacklogInSmallTransactions(t *testing.T, backend string) {
	ctx := context.Background()
	st := &retentionLog{Store: openWorkerStoreOn(t, backend)}
	const n = 1200
	old := time.Now().Add(-48 * time.Hour)
	for done := 0; done < n; {
		k := min(600, n-done)
		nts := make([]store.NewTask, k)
		for i := range nts {
			nts[i] = store.NewTask{ID: fmt.Sprintf("ret-%05d", done+i), Type: "ret.t", Payload: []byte("null")}
		}
		if _, err := st.InsertTasks(ctx, store.InsertParams{Tasks: nts, Now: old}); err != nil {
			t.Fatal(err)
		}
		leased, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"ret.t"}, Limit: k, WorkerID: "w", LeaseDuration: time.Hour, Now: old})
		if err != nil || len(leased) != k {
			t.Fatalf("fetch: %d of %d tasks, %v", len(leased), k, err)
		}
		outs := make([]store.Outcome, k)
		for i, tk := range leased {
			outs[i] = store.Outcome{TaskID: tk.ID, LeaseID: tk.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}
		}
		if _, err := st.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: old}); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	e := startWorkerEngine(t, st, Config{NodeID: "retention-test", SucceededRetention: time.Hour, RetentionInterval: time.Hour})
	waitFor(t, "retention to delete the backlog", func() bool { _, total := st.deleted(); return total >= n })
	passes, total := st.deleted()
	if total != n {
		t.Errorf("retention deleted %d tasks, want %d", total, n)
	}
	for i, p := range passes {
		if p.Succeeded > 1000 {
			t.Errorf("retention pass %d deleted %d tasks in one transaction; want at most 1000 a class", i, p.Succeeded)
		}
	}
	if got := e.Retained().Succeeded; got != n {
		t.Errorf("Retained().Succeeded = %d, want %d", got, n)
	}
	stats, err := st.Stats(ctx, store.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range stats {
		if ts.Type == "ret.t" && ts.RetentionDeleted[store.StateSucceeded] != n {
			t.Errorf("retention totals: %d succeeded tasks of ret.t, want %d", ts.RetentionDeleted[store.StateSucceeded], n)
		}
	}
}

// TestRetentionInForceIsShownWithDefaultsApplied: Retention reports what
// the leader enforces, zero fields as their defaults and negative ones as
// kept forever, and the scheduler logs it when its loops start, so that an
// operator sees what will be deleted (an unlabelled number of seconds
// where days were meant emptied the dead-letter queue unnoticed).
func TestRetentionInForceIsShownWithDefaultsApplied(t *testing.T) {
	st := backendtest.Open(t, "sqlite", "NORMAL")
	var logs logBuffer
	e, err := New(Config{Store: st, NodeID: "retention-shown", CancelledRetention: -1, DeadRetention: 36 * time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{Succeeded: 24 * time.Hour, Cancelled: -1, Dead: 36 * time.Hour}
	if got := e.Retention(); got != want {
		t.Errorf("Retention() = %+v, want %+v", got, want)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	line := `msg="scheduler loops started" node=retention-shown retention.succeeded=1d retention.cancelled=forever retention.dead=36h0m0s`
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; !strings.Contains(logs.String(), line); i++ {
		if i >= 1000 || time.Now().After(deadline) {
			t.Fatalf("no %q in the log within 10 s:\n%s", line, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaderPrunesNodesNotSeenForNodeRetention: the leader's retention
// passes delete the registry rows of nodes not seen for NodeRetention (each
// restart registers a new node id by default, so the rows of stopped and
// crashed nodes would pile up without bound), and keep those seen since.
func TestLeaderPrunesNodesNotSeenForNodeRetention(t *testing.T) {
	backendtest.Run(t, testLeaderPrunesNodesNotSeenForNodeRetention)
}

func testLeaderPrunesNodesNotSeenForNodeRetention(t *testing.T, backend string) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, backend)
	now := time.Now()
	for id, seen := range map[string]time.Time{
		"gone-8d":  now.Add(-8 * 24 * time.Hour),
		"gone-2d":  now.Add(-2 * 24 * time.Hour),
		"recent":   now.Add(-time.Minute),
		"gone-30d": now.Add(-30 * 24 * time.Hour),
	} {
		n := store.Node{ID: id, Host: "h", Version: "v", Role: "stopped", StartedAt: seen.Add(-time.Hour)}
		if err := st.HeartbeatNode(ctx, n, seen); err != nil {
			t.Fatal(err)
		}
	}
	startWorkerEngine(t, st, Config{NodeID: "pruner", NodeRetention: 3 * 24 * time.Hour,
		RetentionInterval: 20 * time.Millisecond})
	ids := func() []string {
		ns, err := st.ListNodes(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ns {
			out = append(out, n.ID)
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := strings.Join(ids(), ",")
		if got == "gone-2d,pruner,recent" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry = %s after 10s; want gone-2d,pruner,recent (the rows not seen for 3 days pruned)", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
