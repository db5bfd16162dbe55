package retryq_test

import (
	"context"
	"errors"
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
