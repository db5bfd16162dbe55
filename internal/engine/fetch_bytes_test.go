package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// TestFetchMayHaveMore: a fetch may have left due tasks behind when it came
// back full, or when its payloads passed half of DefaultFetchBytes (a fetch
// the byte bound cut short: pull leases and push deliveries); a short fetch
// of small payloads means the queue is drained.
func TestFetchMayHaveMore(t *testing.T) {
	task := func(size int) store.Task { return store.Task{Payload: json.RawMessage(strings.Repeat("1", size))} }
	for _, tc := range []struct {
		name  string
		tasks []store.Task
		limit int
		want  bool
	}{
		{"empty", nil, 10, false},
		{"short and small", []store.Task{task(10), task(10)}, 10, false},
		{"full", []store.Task{task(10), task(10)}, 2, true},
		{"short, at half the bound", []store.Task{task(DefaultFetchBytes / 4), task(DefaultFetchBytes / 4)}, 10, false},
		{"short, past half the bound", []store.Task{task(DefaultFetchBytes / 4), task(DefaultFetchBytes/4 + 1)}, 10, true},
	} {
		if got := fetchMayHaveMore(tc.tasks, tc.limit); got != tc.want {
			t.Errorf("%s: fetchMayHaveMore = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWorkerFetchOfLargePayloadsFetchesAgainAtOnce(t *testing.T) {
	backendtest.Run(t, testWorkerFetchOfLargePayloadsFetchesAgainAtOnce)
}

// testWorkerFetchOfLargePayloadsFetchesAgainAtOnce: an in-process worker
// whose fetch comes back short but with payloads past half of
// DefaultFetchBytes takes it for a possible backlog (fetchMayHaveMore) and
// fetches again at once, not at its next poll (an hour here); the tasks it
// got all run. (In-process fetches have no byte bound, so the first fetch
// takes them all; the payloads are kept just past the threshold, since
// larger ones made the test slow on a loaded machine under -race.)
func testWorkerFetchOfLargePayloadsFetchesAgainAtOnce(t *testing.T, backend string) {
	st := openWorkerStoreOn(t, backend)
	const n, size = 3, DefaultFetchBytes/6 + 1024 // together just past half the bound
	var news []store.NewTask
	now := time.Now()
	for i := range n {
		news = append(news, store.NewTask{ID: fmt.Sprintf("big_%d", i), Type: "big", RunAt: now,
			Payload: json.RawMessage(`"` + strings.Repeat("x", size) + `"`)})
	}
	// Inserted before the engine starts: no enqueue wakes the worker.
	if _, err := st.InsertTasks(context.Background(), store.InsertParams{Tasks: news, Now: now}); err != nil {
		t.Fatal(err)
	}
	e := startWorkerEngine(t, st, Config{LeaseDuration: 30 * time.Second, NoScheduler: true, PollInterval: time.Hour})
	var ran atomic.Int64
	runWorker(t, e, WorkerConfig{Types: []string{"big"}, Concurrency: 10, FetchBatch: 10,
		Handle: func(context.Context, *store.Task) error {
			ran.Add(1)
			return nil
		}})
	for _, nt := range news {
		waitTask(t, e, nt.ID, nt.ID+" to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
	}
	waitFor(t, "the worker's second fetch", func() bool { return e.Counters().Fetches >= 2 })
	if got := ran.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}
