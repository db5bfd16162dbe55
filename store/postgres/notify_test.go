package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
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

// TestListenerSurvivesIdleSessionTimeout: an operator set
// idle_session_timeout on the database. The listener's session, idle by
// design while it waits for notifications, stays connected past the
// timeout; the server used to end it each time the timeout passed (the
// listener then reconnected, losing what was notified meanwhile).
func TestListenerSurvivesIdleSessionTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	x := connect(t, url)
	s := openURL(t, url, nil)
	ctx := t.Context()
	setDatabase(t, x, "idle_session_timeout", "200ms") // for sessions opened from now on
	ch := s.Wakeups(ctx)
	waitWakeup(t, ch, "the first connection")
	var pid int
	waitUntil(t, x, "the listener to listen", `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`)
	if err := x.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var idleLong *bool
		err := x.QueryRow(ctx, `SELECT (SELECT now() - state_change > interval '800 ms' FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&idleLong)
		if err != nil {
			t.Fatal(err)
		}
		if idleLong == nil {
			t.Fatal("the server ended the listener's session at its idle timeout")
		}
		if *idleLong {
			break // idle four times the timeout, still there
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener's session never stayed idle for 800ms")
		}
	}
	drain(ch)
	if _, err := x.Exec(ctx, "NOTIFY "+publicChannel); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, ch, "a notification after the idle period")
}

// TestCancelNotificationTaskIDWithSpace: a running task whose id holds a
// space is cancelled; the cancellation delivered to Cancellations names
// that task and its lease (the payload used to be split at the first
// space, which named task "a").
func TestCancelNotificationTaskIDWithSpace(t *testing.T) {
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	wake := s.Wakeups(ctx)
	waitWakeup(t, wake, "listener up")
	cancels := s.Cancellations(ctx)
	now := time.Now()
	nt := store.NewTask{ID: "a b", Type: "email"}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{nt}, Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if _, err := s.CancelTask(ctx, store.CancelParams{ID: nt.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	select {
	case ref := <-cancels:
		if ref.TaskID != nt.ID || ref.LeaseID != got[0].LeaseID {
			t.Errorf("cancellation names task %q lease %q, want task %q lease %q", ref.TaskID, ref.LeaseID, nt.ID, got[0].LeaseID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cancellation delivered")
	}
}

// TestCancelPayload: what cancelPayload writes publishCancel reads back,
// whatever the ids hold; payloads over PostgreSQL's bound are not sent.
func TestCancelPayload(t *testing.T) {
	for _, c := range []struct{ id, lease string }{
		{"a", "L"}, {"a b", "x y z"}, {"12 34", "5"}, {"é", " "}, {strings.Repeat("i", 4000), strings.Repeat("L", 3980)},
	} {
		p, ok := cancelPayload(c.id, c.lease)
		if !ok {
			t.Fatalf("cancelPayload(%.20q, %.20q) refused a %d-byte payload", c.id, c.lease, len(p))
		}
		s := &Store{cancelSubs: map[chan store.LeaseRef]struct{}{}}
		ch := make(chan store.LeaseRef, 1)
		s.cancelSubs[ch] = struct{}{}
		s.publishCancel(p)
		select {
		case ref := <-ch:
			if ref.TaskID != c.id || ref.LeaseID != c.lease {
				t.Errorf("payload %.40q read back as %.20q / %.20q", p, ref.TaskID, ref.LeaseID)
			}
		default:
			t.Errorf("payload %.40q delivered nothing", p)
		}
	}
	if p, ok := cancelPayload(strings.Repeat("i", 4000), strings.Repeat("L", 4000)); ok {
		t.Errorf("a %d-byte payload was accepted", len(p))
	}
	for _, bad := range []string{"cancel ", "cancel x", "cancel 0 ab", "cancel 3 abc", "cancel -1 ab", "cancel 9 ab"} {
		s := &Store{cancelSubs: map[chan store.LeaseRef]struct{}{}}
		ch := make(chan store.LeaseRef, 1)
		s.cancelSubs[ch] = struct{}{}
		s.publishCancel(bad)
		if len(ch) != 0 {
			t.Errorf("malformed payload %q delivered %v", bad, <-ch)
		}
	}
}

// TestRetryAndRedriveWakeOnlyWhenTheyApply: a manual retry and a redrive
// that put tasks back to pending send one wake-up each (their statement
// sends it, at commit), and ones that change nothing send none.
func TestRetryAndRedriveWakeOnlyWhenTheyApply(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	wakeups := wakeupCounter(ctx, t, s, url)
	tasks := leased(t, s, "w", 2, t0)
	if _, err := s.CancelTask(ctx, store.CancelParams{ID: tasks[0].ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Now: t0, Outcomes: []store.Outcome{{TaskID: tasks[1].ID, LeaseID: tasks[1].LeaseID,
		State: store.StateDead, DeadReason: store.DeadNonRetryable, OutcomeKind: store.OutcomeFailed,
		Error: &store.ErrorInfo{Code: "bad", Message: "bad", Class: "permanent"}}}}); err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
	wakeups("setup")
	if _, err := s.RetryTask(ctx, store.RetryParams{ID: tasks[0].ID, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if n := wakeups("retry"); n != 1 {
		t.Errorf("a retry sent %d wake-ups, want 1", n)
	}
	if _, err := s.RetryTask(ctx, store.RetryParams{ID: tasks[0].ID, Now: t0}); err == nil {
		t.Fatal("retry of a pending task succeeded")
	}
	if n := wakeups("failed retry"); n != 0 {
		t.Errorf("a retry that changed nothing sent %d wake-ups, want 0", n)
	}
	if n, err := s.RedriveDead(ctx, store.DeadFilter{Now: t0}); err != nil || n != 1 {
		t.Fatalf("redrive = %d, %v; want 1", n, err)
	}
	if n := wakeups("redrive"); n != 1 {
		t.Errorf("a redrive sent %d wake-ups, want 1", n)
	}
	if n, err := s.RedriveDead(ctx, store.DeadFilter{Now: t0}); err != nil || n != 0 {
		t.Fatalf("second redrive = %d, %v; want 0", n, err)
	}
	if n := wakeups("empty redrive"); n != 0 {
		t.Errorf("a redrive of nothing sent %d wake-ups, want 0", n)
	}
}

// wakeupCounter listens for the store's wake-ups on a connection of its own
// to the database at url and returns a function that counts the wake-ups
// delivered before the marker it sends through s: notifications arrive in
// commit order.
func wakeupCounter(ctx context.Context, t *testing.T, s *Store, url string) func(marker string) int {
	t.Helper()
	l := connect(t, url)
	if _, err := l.Exec(ctx, "LISTEN "+publicChannel); err != nil {
		t.Fatal(err)
	}
	return func(marker string) int {
		t.Helper()
		if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", publicChannel, marker); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			msg, err := l.WaitForNotification(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", marker, err)
			}
			if msg.Payload == marker {
				return n
			}
			if msg.Payload == "" || strings.HasPrefix(msg.Payload, duePrefix) {
				n++ // a wake-up for any type, or for an insert's types
			}
		}
	}
}

// TestWakeupsStayInTheirSchema: two deployments in two schemas of one
// database notify on channels of their own. An insert in schema A wakes
// A's listener and not B's, and a cancellation in B is not delivered to
// A's Cancellations (all used to share the channel retryq_wakeup, so
// every deployment woke every other and saw its task and lease ids).
func TestWakeupsStayInTheirSchema(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	x := connect(t, dbURL)
	if _, err := x.Exec(ctx, `CREATE SCHEMA tenant_a; CREATE SCHEMA tenant_b`); err != nil {
		t.Fatal(err)
	}
	a := openURL(t, withSearchPath(t, dbURL, "tenant_a"), nil)
	b := openURL(t, withSearchPath(t, dbURL, "tenant_b"), nil)
	wakeA, wakeB := a.Wakeups(ctx), b.Wakeups(ctx)
	waitWakeup(t, wakeA, "A's listener up")
	waitWakeup(t, wakeB, "B's listener up")
	cancelsA, cancelsB := a.Cancellations(ctx), b.Cancellations(ctx)
	runA, runB := leased(t, a, "a", 1, t0), leased(t, b, "b", 2, t0)

	// cancelled cancels task on s and waits for its cancellation to come
	// back through cancels: every notification committed before it has then
	// been handled by s's listener.
	cancelled := func(s *Store, cancels <-chan store.LeaseRef, task store.Task) {
		t.Helper()
		if _, err := s.CancelTask(ctx, store.CancelParams{ID: task.ID, Now: t0}); err != nil {
			t.Fatal(err)
		}
		select {
		case ref := <-cancels:
			if ref.TaskID != task.ID || ref.LeaseID != task.LeaseID {
				t.Errorf("cancelling %s delivered the cancellation of task %q lease %q", task.ID, ref.TaskID, ref.LeaseID)
			}
		case <-ctx.Done():
			t.Fatalf("the cancellation of %s never arrived", task.ID)
		}
	}
	cancelled(b, cancelsB, runB[0]) // B has handled its own inserts' wake-ups
	drain(wakeB)

	if _, err := a.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("new", 1), Now: t0}); err != nil {
		t.Fatal(err)
	}
	waitWakeup(t, wakeA, "an insert in A")
	cancelled(b, cancelsB, runB[1]) // committed after A's insert
	select {
	case <-wakeB:
		t.Error("an insert in schema A woke the store of schema B")
	default:
	}
	cancelled(a, cancelsA, runA[0]) // fails if B's cancellations came first
}

// TestWakeupsInSchemasOfAnyName: a deployment wakes its own listener
// whatever its schema's name: capitals, quotes and spaces (the channel is
// LISTENed as a quoted identifier), and names too long to fit PostgreSQL's
// 63-byte identifier bound after the channel's prefix, multibyte ones
// included. Every channel fits the bound and names one schema; public's
// is retryq_wakeup, as before channels were per schema.
func TestWakeupsInSchemasOfAnyName(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	x := connect(t, dbURL)
	schemas := []string{
		`Tenant "Q" x`,
		strings.Repeat("s", 49),
		strings.Repeat("s", 50),
		strings.Repeat("é", 31) + "x", // 63 bytes
		strings.Repeat("é", 31) + "y",
	}
	seen := map[string]string{}
	for i, schema := range schemas {
		quoted := pgx.Identifier{schema}.Sanitize()
		if _, err := x.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
			t.Fatal(err)
		}
		s := openURL(t, withSearchPath(t, dbURL, quoted), nil)
		var channel string
		if err := s.pool.QueryRow(ctx, "SELECT "+notifyChannelSQL).Scan(&channel); err != nil {
			t.Fatal(err)
		}
		if len(channel) > 63 {
			t.Errorf("schema %q: channel %q is %d bytes, over PostgreSQL's 63", schema, channel, len(channel))
		}
		if other, ok := seen[channel]; ok {
			t.Errorf("schemas %q and %q share channel %q", other, schema, channel)
		}
		seen[channel] = schema
		wake := s.Wakeups(ctx)
		waitWakeup(t, wake, "listener up in "+schema)
		drain(wake)
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks(fmt.Sprint(i), 1), Now: t0}); err != nil {
			t.Fatal(err)
		}
		waitWakeup(t, wake, "an insert in schema "+schema)
	}
	var public string
	if err := x.QueryRow(ctx, "SELECT "+notifyChannelSQL).Scan(&public); err != nil || public != publicChannel {
		t.Errorf("the schema public's channel is %q (%v), want %q", public, err, publicChannel)
	}
}

// TestListenerReconnectsWhenCutWhileListening: the network path of the
// listener's new connection is cut silently while it sends LISTEN (the
// server's reply never arrives). The listener gives up on that connection
// within its connect timeout and listens on a new one; it used to wait for
// the reply as long as the store stayed open, never waking anyone again.
func TestListenerReconnectsWhenCutWhileListening(t *testing.T) {
	t.Parallel()
	proxy, s, _ := cutPair(t, pgtest.URL(t), func(c *Config) { c.ConnectTimeout = time.Second })
	proxy.cutOnReply("LISTEN")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	wake := s.Wakeups(ctx)
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatal("no listener up within 30s of a cut during LISTEN")
	}
	if proxy.replyCut.Load() != nil {
		t.Fatal("LISTEN's reply never came through the proxy; the test cut nothing")
	}
}
