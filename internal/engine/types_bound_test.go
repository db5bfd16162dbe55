package engine

import (
	"context"
	"fmt"
	"testing"
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
