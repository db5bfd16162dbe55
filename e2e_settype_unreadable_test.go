package retryq_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
)

// TestSetTypeReplacesAPolicyItCannotRead: a stored policy this binary
// cannot decode (a newer version's field) is replaced by SetType, which is
// how an operator puts such a type back under a policy this version runs,
// and the type's push target is kept. Before, SetType failed with the
// decoding error, so the type could not be fixed from this version.
func TestSetTypeReplacesAPolicyItCannotRead(t *testing.T) {
	ctx := context.Background()
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	if _, err := e.st.PutType(ctx, store.TypeConfig{
		Type: "hook", Policy: []byte(`{"max_attempts":1,"field_from_a_newer_version":1}`),
		Target: []byte(`{"url":"http://127.0.0.1:9/hook","concurrency":2}`),
	}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "hook", Policy: fastPolicy(6)}); err != nil {
		t.Fatalf("SetType over an unreadable policy: %v", err)
	}
	got, err := e.st.GetType(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	var tg map[string]any
	if err := json.Unmarshal(got.Target, &tg); err != nil || tg["url"] != "http://127.0.0.1:9/hook" || tg["concurrency"] != 2.0 {
		t.Errorf("target after SetType = %s (%v), want the stored one", got.Target, err)
	}
	var pol struct {
		MaxAttempts int `json:"max_attempts"`
	}
	if err := json.Unmarshal(got.Policy, &pol); err != nil || pol.MaxAttempts != 6 {
		t.Errorf("policy after SetType = %s, want max_attempts 6", got.Policy)
	}

	// A target it cannot read is an error: it could not be kept.
	if _, err := e.st.PutType(ctx, store.TypeConfig{Type: "odd", Target: []byte(`{"url":"http://127.0.0.1:9/x","field_from_a_newer_version":1}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "odd", Policy: fastPolicy(2)}); err == nil {
		t.Error("SetType replaced a push target it could not read")
	}
}
