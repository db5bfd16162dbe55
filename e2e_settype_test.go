package retryq_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retryq/retryq"
)

// TestSetTypeKeepsPushTarget: SetType changes a type's policy, timeout and
// priority; the push target an operator gave the type through the HTTP API
// or the CLI stays, so its tasks keep being delivered.
func TestSetTypeKeepsPushTarget(t *testing.T) {
	ctx := context.Background()
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	target := json.RawMessage(`{"url":"http://127.0.0.1:9/hook","method":"POST","timeout_seconds":5,"concurrency":2}`)
	cur, err := e.st.GetType(ctx, "hook")
	if err == nil {
		t.Fatalf("type exists before the test: %+v", cur)
	}
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hook", Policy: fastPolicy(3), Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	tc, err := e.st.GetType(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	tc.Target = target
	if _, err := e.st.PutType(ctx, tc, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hook", Policy: fastPolicy(7), Timeout: 2 * time.Second, Priority: 4}); err != nil {
		t.Fatal(err)
	}
	got, err := e.st.GetType(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	var gotT, wantT map[string]any
	if err := json.Unmarshal(got.Target, &gotT); err != nil {
		t.Fatalf("target after SetType: %q: %v", got.Target, err)
	}
	_ = json.Unmarshal(target, &wantT)
	if gotT["url"] != wantT["url"] || gotT["concurrency"] != wantT["concurrency"] {
		t.Errorf("target after SetType = %s, want %s", got.Target, target)
	}
	var pol struct {
		MaxAttempts int `json:"max_attempts"`
	}
	if err := json.Unmarshal(got.Policy, &pol); err != nil || pol.MaxAttempts != 7 || got.Priority != 4 || got.Timeout != 2*time.Second {
		t.Errorf("SetType did not store the new settings: policy %s, priority %d, timeout %v", got.Policy, got.Priority, got.Timeout)
	}
}
