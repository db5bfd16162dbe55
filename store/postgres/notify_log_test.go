package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
)

// listenerLog records the listener's log lines by level.
type listenerLog struct {
	mu    sync.Mutex
	lines []slog.Record
}

func (l *listenerLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *listenerLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *listenerLog) WithGroup(string) slog.Handler            { return l }

func (l *listenerLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Clone())
	return nil
}

// count returns how many listener lines were logged at level, and how many
// in all.
func (l *listenerLog) count(level slog.Level) (atLevel, all int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.lines {
		if !strings.Contains(r.Message, "wakeup listener") {
			continue
		}
		all++
		if r.Level == level {
			atLevel++
		}
	}
	return atLevel, all
}

// TestListenerLogsAnOutageOnce: while the server is down the listener
// tries again and again, backing off; it warns once when the outage
// starts and says once, at Info, that it reconnected, the attempts in
// between going to Debug. It used to warn at every attempt (about one
// line per ReconnectMax for as long as the outage lasted, on every node).
func TestListenerLogsAnOutageOnce(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	url := c.NewDatabase(t)
	logs := &listenerLog{}
	s := openURL(t, url, func(c *Config) {
		c.ReconnectMin, c.ReconnectMax = 10*time.Millisecond, 40*time.Millisecond
		c.Logger = slog.New(logs)
	})
	ctx := t.Context()
	ch := s.Wakeups(ctx)
	waitWakeup(t, ch, "the first connection")
	// Up longer than ReconnectMax: the drop below is an outage of its own.
	x := connect(t, url)
	waitUntil(t, x, "the listener to listen", `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %' AND now() - backend_start > interval '100 ms'`)
	_ = x.Close(ctx)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, all := logs.count(slog.LevelWarn); all >= 6 {
			break // the drop and at least five failed attempts
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener logged no repeated attempts while the server was down")
		}
	}
	drain(ch)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, ch, "reconnect")
	warns, all := logs.count(slog.LevelWarn)
	infos, _ := logs.count(slog.LevelInfo)
	if warns != 1 || infos != 1 {
		t.Errorf("an outage with %d listener lines logged %d warnings and %d infos, want 1 and 1", all, warns, infos)
	}
}
