package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRetentionBoundsAreRefusedNamingTheField: New refuses, with an
// ErrInvalid naming the field, a RetentionInterval under
// MinRetentionInterval and a positive NodeRetention under
// MinNodeRetention, and takes the minimums (and a negative NodeRetention,
// kept forever). A RetentionInterval of 1 ns was taken: the scheduler set
// its next retention pass a nanosecond ahead after every pass and so ran
// pass after pass with no pause (about 600 a second on SQLite, each with
// two write transactions). A NodeRetention of a second was taken too: the
// leader deleted the registry rows of live nodes, its own included, at
// every retention pass (a node writes its row every 5 s and counts as
// alive for 30 s), so that GET /v1/nodes and retryq nodes showed them gone
// and no alive node leading.
func TestRetentionBoundsAreRefusedNamingTheField(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	for _, tc := range []struct {
		field string
		cfg   Config
		value time.Duration
	}{
		{"RetentionInterval", Config{Store: st, RetentionInterval: time.Nanosecond}, time.Nanosecond},
		{"RetentionInterval", Config{Store: st, RetentionInterval: MinRetentionInterval - 1}, MinRetentionInterval - 1},
		{"NodeRetention", Config{Store: st, NodeRetention: time.Second}, time.Second},
		{"NodeRetention", Config{Store: st, NodeRetention: MinNodeRetention - 1}, MinNodeRetention - 1},
	} {
		_, err := New(tc.cfg)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New with %s %v = %v, want ErrInvalid naming it", tc.field, tc.value, err)
		}
	}
	for _, nodes := range []time.Duration{MinNodeRetention, -1} {
		e, err := New(Config{Store: st, RetentionInterval: MinRetentionInterval, NodeRetention: nodes})
		if err != nil {
			t.Fatalf("New with RetentionInterval %v, NodeRetention %v: %v", MinRetentionInterval, nodes, err)
		}
		if c := e.Config(); c.RetentionInterval != MinRetentionInterval || c.NodeRetention != nodes {
			t.Errorf("effective RetentionInterval %v, NodeRetention %v; want %v and %v kept", c.RetentionInterval, c.NodeRetention, MinRetentionInterval, nodes)
		}
	}
}
