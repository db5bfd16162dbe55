package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// logRecord finds the one JSON log record whose msg is msg and returns its
// attributes other than time, level and msg.
func logRecord(t *testing.T, out, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	for line := range strings.Lines(out) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != msg {
			continue
		}
		if found != nil {
			t.Fatalf("two %q records:\n%s", msg, out)
		}
		delete(rec, "time")
		delete(rec, "level")
		delete(rec, "msg")
		found = rec
	}
	if found == nil {
		t.Fatalf("no %q record:\n%s", msg, out)
	}
	return found
}

// TestDeadChangeLogNamesOnlyTheFiltersGiven: the log line of a redrive or
// purge names the filters the operator gave, every one of them (since,
// older_than's cutoff, no_error_code, ids, limit included), and no empty
// ones; one without any filter says that it took the whole DLQ.
func TestDeadChangeLogNamesOnlyTheFiltersGiven(t *testing.T) {
	ctx := context.Background()
	since := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	before := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	cases := []struct {
		name string
		do   func(e *Engine) (int, error)
		msg  string
		want map[string]any
	}{
		{"redrive all", func(e *Engine) (int, error) { return e.Redrive(ctx, store.DeadFilter{}) },
			"dead tasks redriven", map[string]any{"count": 2.0, "filter": "all"}},
		{"redrive by code", func(e *Engine) (int, error) { return e.Redrive(ctx, store.DeadFilter{ErrorCode: "E1"}) },
			"dead tasks redriven", map[string]any{"count": 1.0, "error_code": "E1"}},
		{"redrive by ids and limit", func(e *Engine) (int, error) {
			return e.Redrive(ctx, store.DeadFilter{IDs: []string{"log-1", "log-2"}, Limit: 5})
		}, "dead tasks redriven", map[string]any{"count": 2.0, "id_count": 2.0, "limit": 5.0}},
		{"purge all", func(e *Engine) (int, error) { return e.Purge(ctx, store.DeadFilter{}) },
			"dead tasks purged", map[string]any{"count": 2.0, "filter": "all"}},
		{"purge by everything else", func(e *Engine) (int, error) {
			return e.Purge(ctx, store.DeadFilter{Type: "dlq.log", NoErrorCode: true, Reason: store.DeadNonRetryable,
				Since: since, Before: before})
		}, "dead tasks purged", map[string]any{"count": 0.0, "type": "dlq.log", "no_error_code": true,
			"reason": store.DeadNonRetryable, "since": since.Format(time.RFC3339Nano), "before": before.Format(time.RFC3339Nano)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := openWorkerStoreOn(t, "sqlite")
			deadTask(t, st, "log-1", "dlq.log", "E1")
			deadTask(t, st, "log-2", "dlq.log", "E2")
			var logs syncBuffer
			e := startWorkerEngine(t, st, Config{NoScheduler: true,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if _, err := tc.do(e); err != nil {
				t.Fatal(err)
			}
			got := logRecord(t, logs.String(), tc.msg)
			if !maps.Equal(got, tc.want) {
				t.Errorf("log attributes = %v (keys %v); want %v", got, slices.Sorted(maps.Keys(got)), tc.want)
			}
		})
	}
}
