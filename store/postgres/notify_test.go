package postgres

import (
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
)

// TestListenerBacksOffWhenConnectionsDrop: a server that accepts the
// listener's connection and drops it right after LISTEN (here: the test
// terminates the listener's backend as soon as it appears) gets the
// reconnects spaced by the growing backoff, not one immediately after the
// other, and each reconnect wakes the fetchers.
func TestListenerBacksOffWhenConnectionsDrop(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, func(c *Config) { c.ReconnectMin, c.ReconnectMax = 100*time.Millisecond, 2*time.Second })
	ctx := t.Context()
	ch := s.Wakeups(ctx)
	waitWakeup(t, ch, "the first connection")
	x := connect(t, url)

	// listener waits for a listening backend other than prev and returns
	// its pid.
	listener := func(prev int) int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			var pid int
			err := x.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
				WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> $1`, prev).Scan(&pid)
			if err != nil {
				t.Fatal(err)
			}
			if pid != 0 {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatal("no listener connected")
			}
		}
	}
	const drops = 5
	pid := listener(0)
	var gaps time.Duration
	for i := range drops {
		drain(ch)
		killed := time.Now()
		if _, err := x.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		pid = listener(pid)
		gaps += time.Since(killed)
		waitWakeup(t, ch, "reconnect")
		t.Logf("drop %d: reconnected after %v", i+1, time.Since(killed).Round(time.Millisecond))
	}
	// Waits of at least half the backoff: 50+100+200+400+800 ms.
	if min := 1550 * time.Millisecond; gaps < min {
		t.Errorf("%d reconnects after drops took %v in all, want at least %v", drops, gaps, min)
	}
}
