package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/retry"
)

// TestTypeChangeReachesAnotherNode: two engines on one PostgreSQL
// database. A change stored through one node is seen by the other within
// the time docs/architecture.md gives (its cache serves an entry unread
// for typeCacheTTL, then reads it again): its policy for the decisions of
// new attempts, and its push target, which from then on refuses pull
// leases of the type there too. Concurrent full replacements from both
// nodes leave one of them whole, never a mix of the two.
func TestTypeChangeReachesAnotherNode(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	a := startWorkerEngine(t, openPG(t, url), Config{NodeID: "types-a"})
	b := startWorkerEngine(t, openPG(t, url), Config{NodeID: "types-b", NoScheduler: true})
	if spec, err := b.TypeSpec(ctx, "prop"); err != nil || spec.Stored {
		t.Fatalf("type prop on node b before any change: stored %v, err %v", spec.Stored, err)
	}
	if _, err := b.Lease(ctx, LeaseRequest{WorkerID: "w", Types: []string{"prop"}}); err != nil {
		t.Fatalf("pull lease of prop on node b before it has a target: %v", err)
	}
	pol := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Second, Jitter: retry.JitterNone, MaxAttempts: 3}
	changed := time.Now()
	if _, err := a.PutType(ctx, TypeSpec{Type: "prop", Policy: pol, Target: &Target{URL: "http://127.0.0.1:9/hook"}}); err != nil {
		t.Fatal(err)
	}
	deadline := changed.Add(typeCacheMaxStale + 5*time.Second)
	for {
		spec, err := b.TypeSpec(ctx, "prop")
		if err != nil {
			t.Fatal(err)
		}
		_, lerr := b.Lease(ctx, LeaseRequest{WorkerID: "w", Types: []string{"prop"}})
		var fe *FieldError
		if spec.Policy.MaxAttempts == 3 && spec.Target != nil && errors.As(lerr, &fe) && fe.Field == "types" {
			if took := time.Since(changed); took > typeCacheTTL+typeStaleWait+2*time.Second {
				t.Fatalf("node b saw the change after %v; want within about %v", took, typeCacheTTL)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b after %v: max attempts %d, target %v, pull lease err %v; want 3, a target, refused",
				time.Since(changed), spec.Policy.MaxAttempts, spec.Target, lerr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Concurrent full replacements: each node writes its own whole config.
	var wg sync.WaitGroup
	for i, e := range []*Engine{a, b} {
		wg.Go(func() {
			for range 20 {
				spec := TypeSpec{Type: "prop", Priority: i + 1, Timeout: time.Duration(i+1) * time.Second,
					Policy: retry.Policy{MaxAttempts: i + 1}}
				if i == 0 {
					spec.Target = &Target{URL: "http://127.0.0.1:9/a"}
				}
				if _, err := e.PutType(ctx, spec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, e := range []*Engine{a, b} {
		spec, err := e.StoredTypeSpec(ctx, "prop")
		if err != nil {
			t.Fatal(err)
		}
		n := spec.Priority
		if (n != 1 && n != 2) || spec.Timeout != time.Duration(n)*time.Second || spec.Policy.MaxAttempts != n || (spec.Target != nil) != (n == 1) {
			t.Fatalf("after concurrent replacements: priority %d, timeout %v, max attempts %d, target %v; want one writer's whole config",
				spec.Priority, spec.Timeout, spec.Policy.MaxAttempts, spec.Target)
		}
	}
}
