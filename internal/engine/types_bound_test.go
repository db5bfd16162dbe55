package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// TestTypeCacheForgetsTypesNotUsedForAWhile: every type name asked about
// (GET /v1/types/{type}, a pull request's types, an enqueue) gets a cache
// entry, configured or not; entries of types not used for longer than the
// cache serves them unread are dropped once the cache is large, so that
// a stream of distinct names (random lookups, per-tenant types that come
// and go) does not grow it for as long as the process runs. Before, no
// entry was ever dropped but by a change of its type.
func TestTypeCacheForgetsTypesNotUsedForAWhile(t *testing.T) {
	e, _ := newTypesEngine(t)
	ctx := context.Background()
	n := 0
	for range 3 {
		for range typeCacheMaxEntries {
			if _, err := e.TypeSpec(ctx, fmt.Sprintf("tenant/%d", n)); err != nil {
				t.Fatal(err)
			}
			n++
		}
		// Unused since: all of them age past the longest they are served unread.
		e.types.mu.Lock()
		for typ, ent := range e.types.m {
			old := *ent
			old.loaded = old.loaded.Add(-typeCacheMaxStale)
			e.types.m[typ] = &old
		}
		e.types.mu.Unlock()
	}
	e.types.mu.RLock()
	size := len(e.types.m)
	e.types.mu.RUnlock()
	if size > 2*typeCacheMaxEntries {
		t.Fatalf("after %d distinct types, %d of them unused, the cache holds %d entries; want at most %d", n, 2*typeCacheMaxEntries, size, 2*typeCacheMaxEntries)
	}
}

// TestTypeCacheSweepKeepsTypesInUseWhoseRefreshFails: the sweep drops the
// entries of types not used for a while, not those of types in use whose
// reads fail (a configuration written by a newer version during a rolling
// upgrade, which this node cannot decode): their last known configuration
// is what the node runs and decides their attempts under. Before, the
// sweep judged "unused" by the time of the last successful read, so the
// first sweep dropped such a type in constant use, and from then on its
// enqueues failed and its attempts were held back.
func TestTypeCacheSweepKeepsTypesInUseWhoseRefreshFails(t *testing.T) {
	e, cs := newTypesEngine(t)
	ctx := context.Background()
	putStored(t, cs, "ocr", 3)
	if _, err := e.TypeSpec(ctx, "ocr"); err != nil {
		t.Fatal(err)
	}
	// Another node, newer, stores a policy this one cannot decode.
	if _, err := cs.Store.PutType(ctx, store.TypeConfig{Type: "ocr", Policy: json.RawMessage(`{"backoff":"fibonacci"}`), Priority: 4}, time.Now()); err != nil {
		t.Fatal(err)
	}
	ageBy(e, "ocr", time.Minute)
	if spec, err := e.TypeSpec(ctx, "ocr"); err != nil || spec.Priority != 3 {
		t.Fatalf("while the configuration does not decode: priority %d, err %v; want the last known 3", spec.Priority, err)
	}
	for i := range typeCacheMaxEntries {
		if _, err := e.TypeSpec(ctx, fmt.Sprintf("tenant/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if spec, err := e.TypeSpec(ctx, "ocr"); err != nil || spec.Priority != 3 {
		t.Fatalf("after a sweep, a type in use whose reads fail: priority %d, err %v; want the last known 3", spec.Priority, err)
	}
}

// TestPutTypeBoundsMaxAttempts: a type's max attempts has the bound of a
// task's own (MaxMaxAttempts), which it stands in for when the task sets
// none. Before, any positive number was stored.
func TestPutTypeBoundsMaxAttempts(t *testing.T) {
	e, _ := newTypesEngine(t)
	ctx := context.Background()
	if _, err := e.PutType(ctx, TypeSpec{Type: "ok", Policy: retry.Policy{MaxAttempts: MaxMaxAttempts}}); err != nil {
		t.Fatalf("max attempts %d: %v", MaxMaxAttempts, err)
	}
	_, err := e.PutType(ctx, TypeSpec{Type: "huge", Policy: retry.Policy{MaxAttempts: MaxMaxAttempts + 1}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "retry" || !strings.Contains(fe.Message, "max_attempts") {
		t.Fatalf("max attempts %d: err %v; want a field error naming retry's max_attempts", MaxMaxAttempts+1, err)
	}
	if spec, err := e.StoredTypeSpec(ctx, "huge"); err != nil || spec.Stored {
		t.Fatalf("refused type stored: %v, %v", spec.Stored, err)
	}
}

// ageCache makes every entry of the type cache, and its last sweep, d
// older: time passes with no type used.
func ageCache(e *Engine, d time.Duration) {
	e.types.mu.Lock()
	defer e.types.mu.Unlock()
	for typ, ent := range e.types.m {
		old := *ent
		old.loaded, old.used = old.loaded.Add(-d), old.used.Add(-d)
		e.types.m[typ] = &old
	}
	e.types.sweptAt = e.types.sweptAt.Add(-d)
}

// TestTypeCacheForgetsABurstOfTypesOnceUnused: a burst of distinct type
// names (a client enqueueing or leasing under 3,000 random names) is
// dropped from the cache once unused, though the cache never grows again
// after it: the types still in use are read again every typeCacheTTL, and
// those reads sweep it. Before, the cache swept only on reaching twice its
// size after the last sweep, so every entry of the burst was kept for as
// long as the process ran.
func TestTypeCacheForgetsABurstOfTypesOnceUnused(t *testing.T) {
	e, _ := newTypesEngine(t)
	ctx := context.Background()
	if _, err := e.TypeSpec(ctx, "ocr"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * typeCacheMaxEntries {
		if _, err := e.TypeSpec(ctx, fmt.Sprintf("burst/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ageCache(e, 2*typeCacheMaxStale)
	// Only ocr is in use from now on: its entry is read again.
	if _, err := e.TypeSpec(ctx, "ocr"); err != nil {
		t.Fatal(err)
	}
	e.types.mu.RLock()
	size := len(e.types.m)
	e.types.mu.RUnlock()
	if size > typeCacheMaxEntries {
		t.Fatalf("after a burst of %d types unused since, the cache holds %d entries; want at most %d", 3*typeCacheMaxEntries, size, typeCacheMaxEntries)
	}
}
