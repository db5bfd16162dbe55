package retryq_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
)

// TestNewClientRefusesALeaderTTLTooShortToLead: a LeaderTTL under
// MinLeaderTTL (LeaderTTL: 10 read as nanoseconds, say) is refused naming
// the field; the engine would otherwise start, renew its lease in a loop
// that never succeeds, and never run delayed tasks or retries.
func TestNewClientRefusesALeaderTTLTooShortToLead(t *testing.T) {
	st := openStore(t, "")
	defer st.Close()
	for _, ttl := range []time.Duration{10, 10 * time.Microsecond, retryq.MinLeaderTTL - 1} {
		c, err := retryq.NewClient(st, retryq.Options{LeaderTTL: ttl})
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), "LeaderTTL") {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("NewClient with LeaderTTL %v = %v, want ErrInvalid naming LeaderTTL", ttl, err)
		}
	}
	c, err := retryq.NewClient(st, retryq.Options{LeaderTTL: retryq.MinLeaderTTL})
	if err != nil {
		t.Fatalf("NewClient with LeaderTTL MinLeaderTTL: %v", err)
	}
	_ = c.Close()
}

// TestInvalidConfigIsErrInvalidNamingTheField: NewClient's and NewWorker's
// refusals are ErrInvalid errors that name the field.
func TestInvalidConfigIsErrInvalidNamingTheField(t *testing.T) {
	st := openStore(t, "")
	defer st.Close()
	for field, o := range map[string]retryq.Options{
		"DefaultTimeout":    {DefaultTimeout: -time.Second},
		"LeaseDuration":     {LeaseDuration: time.Millisecond},
		"PollInterval":      {PollInterval: -time.Second},
		"RetentionInterval": {RetentionInterval: -time.Second},
		"NodeRetention":     {NodeRetention: time.Second},
	} {
		c, err := retryq.NewClient(st, o)
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), field) {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("NewClient with a bad %s = %v, want ErrInvalid naming it", field, err)
		}
	}
	c, err := retryq.NewClient(st, retryq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := retryq.HandlerFunc(func(context.Context, *retryq.Task) error { return nil })
	for field, cfg := range map[string]retryq.WorkerConfig{
		"Handler":       {Types: []string{"a"}},
		"Types":         {Handler: retryq.NewMux()},
		"Concurrency":   {Handler: h, Types: []string{"a"}, Concurrency: -1},
		"ShutdownGrace": {Handler: h, Types: []string{"a"}, ShutdownGrace: -time.Second},
	} {
		if _, err := retryq.NewWorker(c, cfg); !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewWorker with a bad %s = %v, want ErrInvalid naming it", field, err)
		}
	}
	if _, err := retryq.NewWorker(nil, retryq.WorkerConfig{Handler: h, Types: []string{"a"}}); !errors.Is(err, retryq.ErrInvalid) {
		t.Errorf("NewWorker without a client = %v, want ErrInvalid", err)
	}
}

// TestNewClientRefusesAPollIntervalUnderTheMinimum: a PollInterval under
// MinPollInterval (1ns, a unit forgotten) is refused naming the field, as
// the server's --poll-interval is; each idle fetcher would otherwise query
// the database in a tight loop. MinPollInterval itself is taken.
func TestNewClientRefusesAPollIntervalUnderTheMinimum(t *testing.T) {
	st := openStore(t, "")
	defer st.Close()
	for _, d := range []time.Duration{time.Nanosecond, retryq.MinPollInterval - 1} {
		c, err := retryq.NewClient(st, retryq.Options{PollInterval: d})
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), "PollInterval") {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("NewClient with PollInterval %v = %v, want ErrInvalid naming PollInterval", d, err)
		}
	}
	c, err := retryq.NewClient(st, retryq.Options{PollInterval: retryq.MinPollInterval})
	if err != nil {
		t.Fatalf("NewClient with PollInterval MinPollInterval: %v", err)
	}
	_ = c.Close()
}

// TestNewWorkerRefusesConfigItCannotRun: NewWorker refuses, naming the
// field, what Run could not run: a Concurrency or Prefetch past its bound
// (math.MaxInt made Run panic sizing its buffer; a huge Concurrency
// starts that many goroutines), an ID no store takes (Run then fetched
// nothing, for ever, without an error), and a Handler that is a nil
// *Mux or HandlerFunc (NewWorker panicked, or every task failed with a
// panic).
func TestNewWorkerRefusesConfigItCannotRun(t *testing.T) {
	st := openStore(t, "")
	defer st.Close()
	c, err := retryq.NewClient(st, retryq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := retryq.HandlerFunc(func(context.Context, *retryq.Task) error { return nil })
	a := []string{"a"}
	for _, tc := range []struct {
		field string
		cfg   retryq.WorkerConfig
	}{
		{"Concurrency", retryq.WorkerConfig{Handler: h, Types: a, Concurrency: retryq.MaxConcurrency + 1}},
		{"Concurrency", retryq.WorkerConfig{Handler: h, Types: a, Concurrency: math.MaxInt}},
		{"Prefetch", retryq.WorkerConfig{Handler: h, Types: a, Prefetch: retryq.MaxPrefetch + 1}},
		{"Prefetch", retryq.WorkerConfig{Handler: h, Types: a, Prefetch: math.MaxInt}},
		{"ID", retryq.WorkerConfig{Handler: h, Types: a, ID: "w\xff"}},
		{"ID", retryq.WorkerConfig{Handler: h, Types: a, ID: "w\x00"}},
		{"ID", retryq.WorkerConfig{Handler: h, Types: a, ID: strings.Repeat("w", 201)}},
		{"Handler", retryq.WorkerConfig{Handler: (*retryq.Mux)(nil)}},
		{"Handler", retryq.WorkerConfig{Handler: retryq.HandlerFunc(nil), Types: a}},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("NewWorker with a bad %s panicked: %v", tc.field, r)
				}
			}()
			_, err := retryq.NewWorker(c, tc.cfg)
			if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewWorker with a bad %s = %v, want ErrInvalid naming it", tc.field, err)
			}
		}()
	}
	for _, cfg := range []retryq.WorkerConfig{
		{Handler: h, Types: a, Concurrency: retryq.MaxConcurrency, Prefetch: retryq.MaxPrefetch, ID: strings.Repeat("w", 200)},
		{Handler: h, Types: a, Prefetch: -1, ID: "wörker/1"},
	} {
		if _, err := retryq.NewWorker(c, cfg); err != nil {
			t.Errorf("NewWorker with Concurrency %d, Prefetch %d, ID %q: %v", cfg.Concurrency, cfg.Prefetch, cfg.ID, err)
		}
	}
}

// TestNewClientRefusesNodeFieldsTheRegistryCannotStore: a NodeID or
// Version no store takes (not UTF-8, a NUL or other control character,
// more than 200 bytes) is refused naming the field, as the server's
// --node-id is. With a NodeID that is not UTF-8 the client started, no
// process could take the scheduler's leadership, and delayed tasks and
// retries never ran, without an error.
func TestNewClientRefusesNodeFieldsTheRegistryCannotStore(t *testing.T) {
	st := openStore(t, "")
	defer st.Close()
	for _, tc := range []struct {
		field string
		o     retryq.Options
	}{
		{"NodeID", retryq.Options{NodeID: "n\xff"}},
		{"NodeID", retryq.Options{NodeID: "n\x00"}},
		{"NodeID", retryq.Options{NodeID: "n\n1"}},
		{"NodeID", retryq.Options{NodeID: strings.Repeat("n", 201)}},
		{"Version", retryq.Options{Version: "v\xff"}},
		{"Version", retryq.Options{Version: "v\x00"}},
		{"Version", retryq.Options{Version: strings.Repeat("v", 201)}},
	} {
		c, err := retryq.NewClient(st, tc.o)
		if !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("NewClient with NodeID %q, Version %q = %v, want ErrInvalid naming %s", tc.o.NodeID, tc.o.Version, err, tc.field)
		}
	}
	c, err := retryq.NewClient(st, retryq.Options{NodeID: strings.Repeat("ñ", 100), Version: "v1.2.3 (é)"})
	if err != nil {
		t.Fatalf("NewClient with a 200-byte UTF-8 NodeID: %v", err)
	}
	_ = c.Close()
}
