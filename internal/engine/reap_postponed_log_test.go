package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// TestReapPostponedWarnedOncePerType: a type whose configuration cannot be
// read leaves its expired leases to a later pass, and the reaper says so
// with a warning the first time only (then at Debug, a reminder at most
// once an hour), and an Info line once the configuration reads again.
// Before, every pass (once per poll interval) warned, for as long as the
// type stayed unreadable: forever for a configuration this binary cannot
// decode.
func TestReapPostponedWarnedOncePerType(t *testing.T) {
	ctx := context.Background()
	st := &typeOutageStore{Store: openWorkerStoreOn(t, "sqlite")}
	now := time.Now()
	pol, _ := json.Marshal(retry.Policy{MaxAttempts: 10, Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond})
	if _, err := st.PutType(ctx, store.TypeConfig{Type: "cfg.t", Policy: pol}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: NewID(now), Type: "cfg.t", Payload: []byte("null"), RunAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"cfg.t"}, Limit: 1, WorkerID: "gone", LeaseDuration: 10 * time.Millisecond, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d tasks, %v", len(got), err)
	}
	st.down.Store(true)
	var logs logBuffer
	e, err := New(Config{Store: st, NodeID: "postponed-log", PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), "reaping postponed") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the reaper did not postpone the task 5 times in 10 s; log:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	warns := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "reaping postponed") {
			warns++
		}
	}
	if warns != 1 {
		t.Fatalf("%d warnings for one type postponed in 5 passes, want 1:\n%s", warns, logs.String())
	}
	st.down.Store(false)
	for !strings.Contains(logs.String(), "level=INFO msg=\"scheduler: reaping resumed: type configuration readable again\" type=cfg.t") {
		if time.Now().After(deadline) {
			t.Fatalf("no Info line once the type's configuration reads again; log:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReapPostponedEndsWhenNoExpiredLeaseOfTheTypeIsLeft: a postponed
// type whose expired tasks went away otherwise (here a cancel, as a late
// outcome or a purge would) leaves the postponed list at the first
// complete pass that meets none of them, saying so at Info, while its
// configuration still cannot be read. It stayed listed for the term,
// without a line saying that nothing was postponed any more, and a later
// expired lease of the type was not warned about again.
func TestReapPostponedEndsWhenNoExpiredLeaseOfTheTypeIsLeft(t *testing.T) {
	ctx := context.Background()
	st := &typeOutageStore{Store: openWorkerStoreOn(t, "sqlite")}
	now := time.Now()
	id := NewID(now)
	if _, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{{ID: id, Type: "cfg.gone", Payload: []byte("null"), RunAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.FetchTasks(ctx, store.FetchParams{Types: []string{"cfg.gone"}, Limit: 1, WorkerID: "gone", LeaseDuration: 10 * time.Millisecond, Now: now}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d tasks, %v", len(got), err)
	}
	st.down.Store(true)
	var logs logBuffer
	e, err := New(Config{Store: st, NodeID: "postponed-gone", PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitFor(t, "the reaper to postpone the type", func() bool { return strings.Contains(logs.String(), "reaping postponed") })
	if _, err := st.CancelTask(ctx, store.CancelParams{ID: id, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	const ended = `level=INFO msg="scheduler: reaping no longer postponed: no expired leases of the type left" type=cfg.gone`
	waitFor(t, "the postponed type to end", func() bool { return strings.Contains(logs.String(), ended) })
	if strings.Contains(logs.String(), "reaping resumed") {
		t.Errorf("the reaper says it resumed a type whose configuration still cannot be read:\n%s", logs.String())
	}
}
