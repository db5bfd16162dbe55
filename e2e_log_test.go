package retryq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
)

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records written so far.
func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b.buf.Bytes()))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("log is not JSON lines: %v\n%s", err, b.buf.Bytes())
		}
		out = append(out, r)
	}
	return out
}

// attemptLogs runs one task that fails once (transiently) then succeeds
// and one that fails permanently, with a JSON logger at level, and returns
// the engine's per-attempt records about the two tasks.
func attemptLogs(t *testing.T, level slog.Level) (records []map[string]any, flaky, doomed string) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(5), Logger: log})
	var calls atomic.Int32
	e.mux.HandleFunc("flaky", func(ctx context.Context, task *retryq.Task) error {
		if calls.Add(1) == 1 {
			return retryq.WithCode("ETIMEDOUT", errors.New("downstream timed out"))
		}
		return nil
	})
	e.mux.HandleFunc("doomed", func(ctx context.Context, task *retryq.Task) error {
		return retryq.Permanent(retryq.WithCode("E400", errors.New("bad payload")))
	})
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	ctx := context.Background()
	a, err := e.client.Enqueue(ctx, "flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.client.Enqueue(ctx, "doomed", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(a.Task.ID, 10*time.Second, store.StateSucceeded)
	e.waitState(b.Task.ID, 10*time.Second, store.StateDead)
	// The log line follows the commit the states above come from.
	want := 3
	if level > slog.LevelInfo {
		want = 2
	}
	waitFor(t, 5*time.Second, "attempt log records", func() bool {
		n := 0
		for _, r := range buf.records(t) {
			if r["task_id"] == a.Task.ID || r["task_id"] == b.Task.ID {
				n++
			}
		}
		return n >= want
	})
	e.stop()
	for _, r := range buf.records(t) {
		if r["task_id"] == a.Task.ID || r["task_id"] == b.Task.ID {
			records = append(records, r)
		}
	}
	return records, a.Task.ID, b.Task.ID
}

// TestAttemptLogs: every attempt's outcome is one structured record with
// the task, its type and the attempt number, the error's code, class and
// message on failures, the retry delay or the reason for the DLQ; the
// logger's level filters them.
func TestAttemptLogs(t *testing.T) {
	records, flaky, doomed := attemptLogs(t, slog.LevelInfo)
	byMsg := map[string]map[string]any{}
	for _, r := range records {
		byMsg[r["msg"].(string)+" "+r["task_id"].(string)] = r
	}
	if len(records) != 3 {
		t.Fatalf("%d records about the two tasks, want 3: %v", len(records), records)
	}
	retry := byMsg["task will retry "+flaky]
	if retry == nil || retry["level"] != "WARN" || retry["type"] != "flaky" || retry["attempt"] != 1.0 ||
		retry["error_code"] != "ETIMEDOUT" || retry["error"] != "downstream timed out" || retry["delay_seconds"] == nil {
		t.Errorf("retry record = %v", retry)
	}
	ok := byMsg["task succeeded "+flaky]
	if ok == nil || ok["level"] != "INFO" || ok["attempt"] != 2.0 || ok["type"] != "flaky" {
		t.Errorf("success record = %v", ok)
	}
	dead := byMsg["task dead "+doomed]
	if dead == nil || dead["level"] != "ERROR" || dead["attempt"] != 1.0 || dead["reason"] != "non_retryable" ||
		dead["error_code"] != "E400" || dead["error_class"] != "permanent" {
		t.Errorf("dead record = %v", dead)
	}

	records, _, _ = attemptLogs(t, slog.LevelWarn)
	for _, r := range records {
		if r["level"] == "INFO" {
			t.Errorf("a WARN logger wrote an INFO record: %v", r)
		}
	}
	if len(records) != 2 {
		t.Errorf("WARN logger: %d records, want the retry and the death: %v", len(records), records)
	}
}
