package retryq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
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

// TestSetTypeWithoutPolicyKeepsTheDefaultPolicy: a SetType that leaves the
// policy zero (to set only a type's timeout or priority) keeps the client's
// Options.DefaultPolicy for the type, as for a type never configured; it
// must not swap it for the retry package's built-in defaults (1s
// exponential backoff, 5 attempts).
func TestSetTypeWithoutPolicyKeepsTheDefaultPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(2)})
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "prio", Priority: 3, Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e.mux.HandleFunc("prio", func(ctx context.Context, task *retryq.Task) error { return errors.New("down") })
	e.startWorker(retryq.WorkerConfig{})
	res, err := e.client.Enqueue(ctx, "prio", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.Priority != 3 {
		t.Fatalf("priority %d, want the type's 3", res.Task.Priority)
	}
	ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
	hist, err := e.client.Attempts(ctx, res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Attempt != 2 || ti.DeadReason != store.DeadMaxAttempts || len(hist) != 2 || hist[0].Delay != 5*time.Millisecond {
		t.Fatalf("attempt %d reason %q history %+v, want the default policy: dead after 2 attempts, 5ms apart", ti.Attempt, ti.DeadReason, hist)
	}
}

// TestSetTypeKeepsATargetJustSetElsewhere: SetType keeps the push target
// that is stored now, even when this node still has the type's older
// configuration cached (it served an enqueue moments before another node,
// or the HTTP API there, set the target): it must not write the stale
// "no target" back and silently turn a push type into one that no worker
// serves.
func TestSetTypeKeepsATargetJustSetElsewhere(t *testing.T) {
	ctx := context.Background()
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hook", Policy: fastPolicy(3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, "hook", nil); err != nil { // caches the type on this node
		t.Fatal(err)
	}
	tc, err := e.st.GetType(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	tc.Target = json.RawMessage(`{"url":"http://127.0.0.1:9/hook"}`)
	if _, err := e.st.PutType(ctx, tc, time.Now()); err != nil { // another node sets the target
		t.Fatal(err)
	}
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hook", Policy: fastPolicy(7)}); err != nil {
		t.Fatal(err)
	}
	got, err := e.st.GetType(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Target) == 0 || string(got.Target) == "null" {
		t.Fatalf("SetType dropped the push target stored by another node: target %q", got.Target)
	}
}

// TestSetTypeRefusesInvalidFieldsNamingTheGoField: SetType's refusals are
// ErrInvalid errors naming TypeConfig's field (Timeout, not the HTTP API's
// timeout_seconds) and, for the timeout, the bound as a duration rather
// than a count of seconds.
func TestSetTypeRefusesInvalidFieldsNamingTheGoField(t *testing.T) {
	ctx := context.Background()
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	for want, tc := range map[string]retryq.TypeConfig{
		"set type: Type: ": {Type: "a b"},
		"set type: Timeout: must be between 0 and 24h0m0s (got 48h0m0s)": {Type: "a", Timeout: 48 * time.Hour},
		"set type: Timeout: must be between 0 and 24h0m0s (got -1s)":     {Type: "a", Timeout: -time.Second},
		"set type: Priority: ": {Type: "a", Priority: 2_000_000},
		"set type: Policy: ":   {Type: "a", Policy: retry.Policy{MaxAttempts: -1}},
	} {
		err := e.client.SetType(ctx, tc)
		if !errors.Is(err, retryq.ErrInvalid) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("SetType(%+v) = %v, want ErrInvalid beginning %q", tc, err, want)
		}
	}
}

// TestSetTypeInvalidPolicyIsErrInvalidPolicy: a policy SetType refuses is
// both ErrInvalid and retry.ErrInvalidPolicy, as Validate's own error is;
// the engine used to keep only its message.
func TestSetTypeInvalidPolicyIsErrInvalidPolicy(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	p := fastPolicy(3)
	p.Multiplier = -2
	err := e.client.SetType(context.Background(), retryq.TypeConfig{Type: "bad.policy", Policy: p})
	if !errors.Is(err, retryq.ErrInvalid) || !errors.Is(err, retry.ErrInvalidPolicy) {
		t.Fatalf("SetType with a negative multiplier: %v, want ErrInvalid and retry.ErrInvalidPolicy", err)
	}
}
