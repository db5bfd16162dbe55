package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// countLines counts the lines of out that hold every one of parts.
func countLines(out string, parts ...string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(l, p) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// TestPushBadTargetLoggedOncePerTarget: a stored push target this binary
// cannot use (undecodable, or failing Target.Validate) is warned about
// when a reload first meets it, at Debug at the reloads after it (a
// reminder at most once an hour), and an Info line says when it is
// replaced by a usable target or removed. Every reload (every 5 s, and
// after each PutType) logged it at Error for as long as it stayed stored.
func TestPushBadTargetLoggedOncePerTarget(t *testing.T) {
	backendtest.Run(t, testPushBadTargetLoggedOncePerTarget)
}

func testPushBadTargetLoggedOncePerTarget(t *testing.T, backend string) {
	ctx := context.Background()
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newPushEnvWith(t, backend, Config{Logger: log})
	st := p.e.cfg.Store
	pol, err := json.Marshal(fastPolicy(1))
	if err != nil {
		t.Fatal(err)
	}
	// Written straight to the store, as an older or newer binary (or a
	// hand-edited row) could have: PutType of the engine refuses both.
	put := func(typ, target string) {
		t.Helper()
		if _, err := st.PutType(ctx, store.TypeConfig{Type: typ, Policy: pol, Target: json.RawMessage(target)}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	put("push.undecodable", `{"url": 5}`)
	put("push.invalid", `{"url": "ftp://example.invalid/hook"}`)
	// push.marker stays bad throughout: its lines count the reloads.
	put("push.marker", `[]`)
	reloads := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for start := countLines(logs.String(), "type=push.marker"); countLines(logs.String(), "type=push.marker") < start+n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d reloads did not run in 10 s; log:\n%s", n, logs.String())
			}
			p.e.pushTypesChanged()
			time.Sleep(5 * time.Millisecond)
		}
	}
	reloads(5)
	out := logs.String()
	for _, typ := range []string{"push.undecodable", "push.invalid"} {
		if n := countLines(out, "level=WARN", "type="+typ); n != 1 {
			t.Errorf("%s: %d warnings in 5 reloads, want 1:\n%s", typ, n, out)
		}
		if n := countLines(out, "level=ERROR", "type="+typ); n != 0 {
			t.Errorf("%s: %d errors in 5 reloads, want none:\n%s", typ, n, out)
		}
	}

	// Another unusable target for the type is warned about again.
	put("push.invalid", `{"url": "http://example.invalid/hook", "concurrency": -1}`)
	waitFor(t, "the replaced bad target to be warned about", func() bool {
		p.e.pushTypesChanged()
		return countLines(logs.String(), "level=WARN", "type=push.invalid", "concurrency") == 1
	})

	// One fixed, one removed: an Info line each, and no more lines after.
	srv := target(t, func(http.ResponseWriter, *http.Request) {})
	put("push.undecodable", `{"url": "`+srv.URL+`"}`)
	put("push.invalid", `null`)
	waitFor(t, "the fixed and the removed target to be logged", func() bool {
		p.e.pushTypesChanged()
		out := logs.String()
		return countLines(out, "level=INFO", "push: target usable again", "type=push.undecodable") == 1 &&
			countLines(out, "level=INFO", "push: unusable target removed", "type=push.invalid") == 1
	})
	before := countLines(logs.String(), "target", "type=push.invalid")
	reloads(3)
	if after := countLines(logs.String(), "target", "type=push.invalid"); after != before {
		t.Errorf("reloads after the removal logged %d more lines of the type:\n%s", after-before, logs.String())
	}
}

// TestPushBadTargetReminder: a bad target still stored is warned about
// again once the reminder interval has passed since the last warning,
// with how many reloads met it and for how long.
func TestPushBadTargetReminder(t *testing.T) {
	var logs logBuffer
	b := badTargetLog{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), every: time.Nanosecond}
	for range 3 {
		b.beginReload()
		b.unusable("t", `{"url": 5}`, "undecodable", errors.New("test"))
		time.Sleep(time.Millisecond)
		b.reloaded(func(string) bool { return false })
	}
	out := logs.String()
	if n := countLines(out, "level=WARN", "push: undecodable target; type not delivered", "type=t"); n != 1 {
		t.Errorf("%d first warnings, want 1:\n%s", n, out)
	}
	if n := countLines(out, "level=WARN", "push: undecodable target still stored; type not delivered", "type=t", "reloads=", "for="); n != 2 {
		t.Errorf("%d reminders with every 1 ns, want 2:\n%s", n, out)
	}
	logs = logBuffer{}
	b.every = time.Hour
	b.beginReload()
	b.unusable("t", `{"url": 5}`, "undecodable", errors.New("test"))
	b.reloaded(func(string) bool { return false })
	if n := countLines(logs.String(), "level=DEBUG", "type=t"); n != 1 {
		t.Errorf("a reload within the hour: %d Debug lines, want 1:\n%s", n, logs.String())
	}
}
