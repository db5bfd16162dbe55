package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// listedPage is a page of GET /v1/tasks or /v1/dlq with the payloads as
// they were sent.
type listedPage struct {
	Tasks []struct {
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
	} `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
}

// stringPayload is a JSON string payload of exactly n bytes.
func stringPayload(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("p", n-2) + `"`)
}

// TestListPagesBoundedByPayloadBytes: GET /v1/tasks and GET /v1/dlq stop a
// page before the task whose payload would take it past
// engine.DefaultListBytes (a page of 1,000 tasks of 8 MiB payloads was
// built whole in memory), always list at least one task, and their
// cursors lead through every task exactly once.
func TestListPagesBoundedByPayloadBytes(t *testing.T) {
	backendtest.Run(t, testListPagesBoundedByPayloadBytes)
}

func testListPagesBoundedByPayloadBytes(t *testing.T, backend string) {
	e := newEnv(t, envOpts{backend: backend})
	const mib = 1 << 20
	payloads := map[string]json.RawMessage{}
	// Inserted through the store: the API's reading of large bodies is not
	// what this tests, and under the race detector it is slow.
	add := func(typ string, sizes ...int) {
		now := e.clock.Now()
		var nts []store.NewTask
		for _, n := range sizes {
			nt := store.NewTask{ID: engine.NewID(now), Type: typ, Payload: stringPayload(n), MaxAttempts: 5}
			payloads[nt.ID] = nt.Payload
			nts = append(nts, nt)
		}
		if _, err := e.st.InsertTasks(context.Background(), store.InsertParams{Tasks: nts, Now: now}); err != nil {
			t.Fatalf("insert tasks: %v", err)
		}
	}
	// Larger than the bound alone, meeting it together, and small ones.
	add("live", 3*mib/2, 100, 5*mib, 700<<10, 10, 3*mib, 300<<10)
	add("doomed", 3*mib, 50, 2*mib)
	dead := map[string]bool{}
	for range 3 {
		dead[e.kill("doomed", "E1")] = true
	}

	list := func(path string, want func(id string) bool) {
		t.Helper()
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(payloads) {
				t.Fatalf("%s: paging does not end", path)
			}
			q := url.Values{"limit": {"1000"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			r := e.must(http.StatusOK, "GET", path+"?"+q.Encode(), nil)
			var p listedPage
			if err := json.Unmarshal(r.raw, &p); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			bytes := 0
			for _, task := range p.Tasks {
				if seen[task.ID] {
					t.Fatalf("%s: %s listed twice", path, task.ID)
				}
				seen[task.ID] = true
				if string(task.Payload) != string(payloads[task.ID]) {
					t.Fatalf("%s: %s listed with %d payload bytes, want %d", path, task.ID, len(task.Payload), len(payloads[task.ID]))
				}
				bytes += len(task.Payload)
			}
			if len(p.Tasks) > 1 && bytes > engine.DefaultListBytes {
				t.Fatalf("%s: page %d lists %d tasks of %d payload bytes, more than the bound %d", path, pages, len(p.Tasks), bytes, engine.DefaultListBytes)
			}
			if p.NextCursor == nil {
				break
			}
			if len(p.Tasks) == 0 {
				t.Fatalf("%s: empty page %d with a cursor", path, pages)
			}
			cursor = *p.NextCursor
		}
		for id := range payloads {
			if want(id) != seen[id] {
				t.Errorf("%s: task %s listed %v, want %v", path, id, seen[id], want(id))
			}
		}
	}
	list("/v1/tasks", func(string) bool { return true })
	list("/v1/dlq", func(id string) bool { return dead[id] })
}
