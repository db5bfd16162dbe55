package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
)

// TestConfigRefusalsAreErrInvalidNamingTheField: New refuses a Config it
// cannot run with an ErrInvalid naming the field, whoever calls it (the
// Go client and the server both build engines): a LeaderTTL under
// MinLeaderTTL, with which no renewal finishes in time and no node ever
// leads, and a PollInterval under MinPollInterval, with which every idle
// fetcher queries the database in a tight loop, included. The minimums
// themselves are taken.
func TestConfigRefusalsAreErrInvalidNamingTheField(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	bad := retry.DefaultPolicy()
	bad.Multiplier = -1
	for field, cfg := range map[string]Config{
		"Store":             {},
		"LeaderTTL":         {Store: st, LeaderTTL: MinLeaderTTL - 1},
		"PollInterval":      {Store: st, PollInterval: time.Nanosecond},
		"LeaseDuration":     {Store: st, LeaseDuration: time.Millisecond},
		"DefaultTimeout":    {Store: st, DefaultTimeout: -time.Second},
		"RetentionInterval": {Store: st, RetentionInterval: -time.Second},
		"DefaultPolicy":     {Store: st, DefaultPolicy: bad},
	} {
		_, err := New(cfg)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("New with a bad %s = %v, want ErrInvalid naming it", field, err)
		}
		if field == "DefaultPolicy" && !errors.Is(err, retry.ErrInvalidPolicy) {
			t.Errorf("New with a bad DefaultPolicy = %v, want it to wrap retry.ErrInvalidPolicy", err)
		}
	}
	e, err := New(Config{Store: st, LeaderTTL: MinLeaderTTL, PollInterval: MinPollInterval, LeaseDuration: MinLeaseDuration})
	if err != nil {
		t.Fatalf("New with the minimums: %v", err)
	}
	if c := e.Config(); c.LeaderTTL != MinLeaderTTL || c.PollInterval != MinPollInterval {
		t.Fatalf("effective config %+v, want the minimums kept", c)
	}
}
