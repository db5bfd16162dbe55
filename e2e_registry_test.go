package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestRegistryShowsLeadershipAtOnce: a node's registry row changes role when
// the node gains the leadership, not at its next heartbeat (every 5 s), so
// operators see who leads right after a takeover.
func TestRegistryShowsLeadershipAtOnce(t *testing.T) {
	backendtest.Run(t, testRegistryShowsLeadershipAtOnce)
}

func testRegistryShowsLeadershipAtOnce(t *testing.T, backend string) {
	st := backendtest.Open(t, backend, "")
	defer st.Close()
	ctx := context.Background()
	start := func(id string) *retryq.Client {
		t.Helper()
		c, err := retryq.NewClient(st, retryq.Options{NodeID: id, LeaderTTL: time.Second, PollInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	role := func(id string) string {
		ns, err := st.ListNodes(ctx, time.Time{})
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		for _, n := range ns {
			if n.ID == id {
				return n.Role
			}
		}
		return ""
	}
	a := start("a")
	defer a.Close()
	waitFor(t, 10*time.Second, "a to show as leader", func() bool { return role("a") == "leader" })
	b := start("b")
	defer b.Close()
	waitFor(t, 10*time.Second, "b to show as standby", func() bool { return role("b") == "standby" })

	// a gives the lease up as it closes; b takes it at its next attempt
	// (every LeaderTTL/4) and rewrites its row then: within 2 s, while its
	// next heartbeat is about 5 s after its first.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// a's last write says it stopped, so the registry never shows two
	// leaders after the handover.
	if r := role("a"); r != "stopped" {
		t.Errorf("a's role after Close = %q; want stopped", r)
	}
	waitFor(t, 2*time.Second, "b to show as leader", func() bool { return role("b") == "leader" })
}

// TestWorkerTypesBounded: a worker naming more types than a fetch may
// (store.MaxFetchTypes), or a type no task can have, is refused by
// NewWorker as ErrInvalid naming the field (and the entry), not when it
// runs.
func TestWorkerTypesBounded(t *testing.T) {
	st := openStore(t, "")
	e := newEnvOn(t, st, retryq.Options{})
	types := make([]string, store.MaxFetchTypes+1)
	for i := range types {
		types[i] = fmt.Sprintf("t%03d", i)
	}
	h := retryq.HandlerFunc(func(context.Context, *retryq.Task) error { return nil })
	for _, c := range []struct {
		types []string
		field string
	}{
		{types, "Types"},
		{[]string{"ok", "email send"}, "Types[1]"},
		{[]string{""}, "Types[0]"},
	} {
		_, err := retryq.NewWorker(e.client, retryq.WorkerConfig{Types: c.types, Handler: h})
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("NewWorker with %d types (%q first) = %v, want ErrInvalid naming %s", len(c.types), c.types[0], err, c.field)
		}
	}
}
