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

func TestWorkerFetchCutByBytesFetchesAgainAtOnce(t *testing.T) {
	backendtest.Run(t, testWorkerFetchCutByBytesFetchesAgainAtOnce)
}

// testWorkerFetchCutByBytesFetchesAgainAtOnce: a fetch that comes back
// short because its payloads reached DefaultFetchBytes is not taken for a
// drained queue: the worker fetches again at once, not at its next poll,
// so a backlog of large tasks is run without waiting PollInterval per
// batch.
func testWorkerFetchCutByBytesFetchesAgainAtOnce(t *testing.T, backend string) {
	st := openWorkerStoreOn(t, backend)
	const n, size = 6, 1500 << 10 // two tasks per fetch
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
	if got := ran.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}
