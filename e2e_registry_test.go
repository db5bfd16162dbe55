package retryq_test

import (
	"context"
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
// (store.MaxFetchTypes) is refused when it starts, with the field named.
func TestWorkerTypesBounded(t *testing.T) { backendtest.Run(t, testWorkerTypesBounded) }

func testWorkerTypesBounded(t *testing.T, backend string) {
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{})
	types := make([]string, store.MaxFetchTypes+1)
	for i := range types {
		types[i] = fmt.Sprintf("t%03d", i)
	}
	w, err := retryq.NewWorker(e.client, retryq.WorkerConfig{Types: types,
		Handler: retryq.HandlerFunc(func(context.Context, *retryq.Task) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "Types") {
		t.Fatalf("Run with %d types = %v, want an error naming Types", len(types), err)
	}
}
