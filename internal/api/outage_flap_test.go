package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/store"
)

// partCorruptStore fails GetTask with a corruption report while bad is
// set, as PostgreSQL does when only the statements meeting a damaged page
// fail; every other call works.
type partCorruptStore struct {
	store.Store
	bad atomic.Bool
}

func (s *partCorruptStore) GetTask(ctx context.Context, id string) (store.Task, error) {
	if s.bad.Load() {
		return store.Task{}, (&pgCorruptStore{}).err("get task")
	}
	return s.Store.GetTask(ctx, id)
}

// apiOutageLines returns the API's outage warnings and recovery lines in
// out (not /readyz's).
func apiOutageLines(out string) (warns, infos []string) {
	for _, l := range linesAt(out, "WARN") {
		if strings.Contains(l, "msg=\"api: ") {
			warns = append(warns, l)
		}
	}
	for _, l := range linesAt(out, "INFO") {
		if strings.Contains(l, "available again") {
			infos = append(infos, l)
		}
	}
	return warns, infos
}

// TestOutageOfAKindEndsOnlyWithASuccessOfThatKind: a full disk on which
// other writes still succeed (a lease that leased nothing, an outcome)
// stays one logged outage until an enqueue commits; so does corruption that
// only some statements meet, until the request that met it works. Before,
// every successful write ended the logged outage, so a client alternating
// an enqueue that failed with a lease that worked logged a warning and a
// recovery line per pair of requests.
func TestOutageOfAKindEndsOnlyWithASuccessOfThatKind(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var fs *fullStore
	var cs *partCorruptStore
	e := newEnv(t, envOpts{
		log: slog.New(slog.NewTextHandler(&logs, nil)),
		wrap: func(st store.Store) store.Store {
			fs = &fullStore{Store: st}
			cs = &partCorruptStore{Store: fs}
			return cs
		},
	})
	id, _ := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	fs.full.Store(true)
	for range 20 {
		e.mustErr(http.StatusServiceUnavailable, CodeStorageFull, "", "POST", "/v1/tasks", map[string]any{"type": "b"})
		e.must(http.StatusOK, "POST", "/v1/leases", map[string]any{"worker_id": "w1", "types": []string{"none"}})
	}
	warns, infos := apiOutageLines(logs.String())
	if len(warns) != 1 || len(infos) != 0 {
		t.Fatalf("a full disk with leases working between failed enqueues: %d warnings and %d recovery lines, want 1 and 0:\n%s", len(warns), len(infos), logs.String())
	}
	fs.full.Store(false)
	e.enqueue(map[string]any{"type": "b"})
	if _, infos = apiOutageLines(logs.String()); len(infos) != 1 {
		t.Fatalf("an enqueue committed after the disk was full: %d recovery lines, want 1:\n%s", len(infos), logs.String())
	}

	cs.bad.Store(true)
	for range 20 {
		e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "GET", "/v1/tasks/"+id, nil)
		e.enqueue(map[string]any{"type": "b"})
	}
	warns, infos = apiOutageLines(logs.String())
	if len(warns) != 2 || len(infos) != 1 {
		t.Fatalf("corruption met by one route with enqueues working between: %d warnings and %d recovery lines in all, want 2 and 1:\n%s", len(warns), len(infos), logs.String())
	}
	cs.bad.Store(false)
	e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil)
	if _, infos = apiOutageLines(logs.String()); len(infos) != 2 {
		t.Fatalf("the request that met the corruption works again: %d recovery lines in all, want 2:\n%s", len(infos), logs.String())
	}
}

// TestFlappingOutageWarnsAtMostOncePerInterval: a database whose writes
// fail and work by turns (the disk fills and empties) warns once and logs
// its recovery once within the reminder interval, the rest at Debug.
// Before, every turn was a warning and a recovery line.
func TestFlappingOutageWarnsAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var fs *fullStore
	e := newEnv(t, envOpts{
		log:  slog.New(slog.NewTextHandler(&logs, nil)),
		wrap: func(st store.Store) store.Store { fs = &fullStore{Store: st}; return fs },
	})
	for range 20 {
		fs.full.Store(true)
		e.mustErr(http.StatusServiceUnavailable, CodeStorageFull, "", "POST", "/v1/tasks", map[string]any{"type": "a"})
		fs.full.Store(false)
		e.enqueue(map[string]any{"type": "a"})
	}
	warns, infos := apiOutageLines(logs.String())
	if len(warns) != 1 || len(infos) != 1 {
		t.Fatalf("20 turns of a full disk within a minute: %d warnings and %d recovery lines, want 1 and 1:\n%s", len(warns), len(infos), logs.String())
	}
}

// readDownStore fails GetTask as unavailable while down is set, as when
// the database is away and the node only serves reads.
type readDownStore struct {
	store.Store
	down atomic.Bool
}

func (s *readDownStore) GetTask(ctx context.Context, id string) (store.Task, error) {
	if s.down.Load() {
		return store.Task{}, fmt.Errorf("get task: %w", store.ErrUnavailable)
	}
	return s.Store.GetTask(ctx, id)
}

// TestOutageMetByReadsOnlyEndsWithARead: an outage that only reads met
// (a node that serves a dashboard, or writes are rare) ends when a read
// works again. Before, only a write ended it, so its warning had no
// recovery line, and the next outage was counted as the same one.
func TestOutageMetByReadsOnlyEndsWithARead(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var rs *readDownStore
	e := newEnv(t, envOpts{
		log:  slog.New(slog.NewTextHandler(&logs, nil)),
		wrap: func(st store.Store) store.Store { rs = &readDownStore{Store: st}; return rs },
	})
	id, _ := e.enqueue(map[string]any{"type": "a"})["id"].(string)
	rs.down.Store(true)
	for range 5 {
		e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "GET", "/v1/tasks/"+id, nil)
	}
	rs.down.Store(false)
	e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil)
	warns, infos := apiOutageLines(logs.String())
	if len(warns) != 1 || len(infos) != 1 || !strings.Contains(infos[0], "outage=unavailable") {
		t.Fatalf("an outage met by reads only, then a read that works: %d warnings and %d recovery lines, want 1 and 1:\n%s", len(warns), len(infos), logs.String())
	}
}
