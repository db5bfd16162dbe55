package engine

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// nodeOutageStore fails the node registry's heartbeats while down is set,
// counting the failures and the writes that worked.
type nodeOutageStore struct {
	*schedOutageStore
	beatFails, beatsOK atomic.Int64
}

func (s *nodeOutageStore) HeartbeatNode(ctx context.Context, n store.Node, now time.Time) error {
	if s.down.Load() {
		s.beatFails.Add(1)
		return errSchedDown
	}
	if err := s.schedOutageStore.HeartbeatNode(ctx, n, now); err != nil {
		return err
	}
	s.beatsOK.Add(1)
	return nil
}

// pokeNodeLoop makes the node loop write its row now, as a change of role
// does.
func pokeNodeLoop(e *Engine) {
	select {
	case e.leading.changed <- struct{}{}:
	default:
	}
}

// TestNodeHeartbeatFailuresLoggedOncePerOutage: while the database is
// away, the node registry's heartbeat (every 5 s, and at each change of
// role) warns at its first failure, logs the others at Debug, and says at
// Info with failures and after when a write works again. It warned at
// every write, twelve lines a minute per node for as long as the outage
// lasted.
func TestNodeHeartbeatFailuresLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	st := &nodeOutageStore{schedOutageStore: &schedOutageStore{Store: newLeaderStore(t).Store}}
	logs := &logBuffer{}
	e, err := New(Config{Store: st, NodeID: "node", Version: "test", NoScheduler: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	waitFor(t, "a first registry write", func() bool { return st.beatsOK.Load() > 0 })

	st.down.Store(true)
	waitFor(t, "four failed heartbeats", func() bool {
		pokeNodeLoop(e)
		return st.beatFails.Load() >= 4
	})
	st.down.Store(false)
	ok := st.beatsOK.Load()
	// Two writes that work: the loop has logged the first's line before
	// it makes the second.
	waitFor(t, "two heartbeats that work again", func() bool {
		pokeNodeLoop(e)
		return st.beatsOK.Load() >= ok+2
	})

	out := logs.String()
	if w := linesWith(out, "WARN", "node heartbeat"); len(w) != 1 {
		t.Errorf("%d warnings for %d failed heartbeats in one outage, want 1:\n%s", len(w), st.beatFails.Load(), strings.Join(w, ""))
	}
	if d := linesWith(out, "DEBUG", "node heartbeat"); len(d) == 0 {
		t.Errorf("the failures after the first are not at Debug:\n%s", out)
	}
	info := linesWith(out, "INFO", "node heartbeat")
	if len(info) != 1 || !strings.Contains(info[0], "node heartbeat works again") ||
		!strings.Contains(info[0], " failures=") || !strings.Contains(info[0], " after=") {
		t.Errorf("recovery lines %q, want one 'node heartbeat works again' with failures and after", info)
	}
}
