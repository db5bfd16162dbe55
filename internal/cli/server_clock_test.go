package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// skewedServer is a retryq API on 127.0.0.1 whose clock is behind this
// machine's by skew: its answers' Date headers and the times in them are on
// its clock. Every dead task, task and group died or changed 5 minutes and
// a half ago on that clock (5m ago, whichever way the Date header's second
// rounds). It records the since filters it receives.
type skewedServer struct {
	url  string
	skew time.Duration

	mu     sync.Mutex
	sinces map[string]string // route: the since filter last received
}

const skewedTaskID = "01HXZ5K3J8T9M2Q4V6W8Y0A1B2"

func startSkewedServer(t *testing.T, skew time.Duration) *skewedServer {
	t.Helper()
	s := &skewedServer{skew: skew, sinces: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().Add(-skew).UTC()
		ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		task := fmt.Sprintf(`{"id": %q, "type": "pay.charge", "payload": {}, "state": "dead", "dead_reason": "non_retryable",
			"priority": 0, "attempt": 1, "max_attempts": 5, "run_at": %q, "created_at": %q, "updated_at": %q,
			"last_error": {"code": "402", "message": "card declined", "class": "permanent"}, "attempts": []}`,
			skewedTaskID, ts(-6*time.Minute), ts(-10*time.Minute), ts(-330*time.Second))
		record := func(v string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sinces[r.Method+" "+r.URL.Path] = v
		}
		switch r.Method + " " + r.URL.Path {
		case "GET /healthz":
			_, _ = io.WriteString(w, `{"status": "ok"}`)
		case "GET /v1/tasks", "GET /v1/dlq":
			record(r.URL.Query().Get("since"))
			_, _ = io.WriteString(w, `{"tasks": [`+task+`], "next_cursor": null}`)
		case "GET /v1/tasks/" + skewedTaskID:
			_, _ = io.WriteString(w, task)
		case "GET /v1/dlq/summary":
			record(r.URL.Query().Get("since"))
			fmt.Fprintf(w, `{"groups": [{"type": "pay.charge", "error_code": "402", "reason": "non_retryable", "count": 1,
				"oldest": %q, "newest": %q}], "total": 1}`, ts(-330*time.Second), ts(-330*time.Second))
		case "POST /v1/dlq/redrive":
			var b struct {
				Since string `json:"since"`
			}
			_ = json.NewDecoder(r.Body).Decode(&b)
			record(b.Since)
			_, _ = io.WriteString(w, `{"redriven": 1}`)
		case "GET /v1/nodes":
			// No "now" (an older server): the Date header is the clock.
			record(r.URL.Query().Get("since"))
			fmt.Fprintf(w, `{"nodes": [{"id": "n1", "host": "h", "version": "v", "role": "leader",
				"started_at": %q, "last_seen": %q, "alive": true}]}`, ts(-time.Hour), ts(-330*time.Second))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "no such route"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// since returns the since filter route last received, as a time.
func (s *skewedServer) since(t *testing.T, route string) time.Time {
	t.Helper()
	s.mu.Lock()
	v := s.sinces[route]
	s.mu.Unlock()
	got, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("%s: since %q: %v", route, v, err)
	}
	return got
}

// TestRelativeTimesAreJudgedOnTheServersClock: the ages that tasks list,
// tasks get, dlq list, dlq summary and nodes print are measured on the
// server's clock (the Date header of its answers), not on this machine's.
// Against a server whose clock is 3 hours behind, a task that died 5
// minutes ago on it was shown as dead for "3h", and against one 3 hours
// ahead as dying "in 2h".
func TestRelativeTimesAreJudgedOnTheServersClock(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Hour, -3 * time.Hour} {
		s := startSkewedServer(t, skew)
		for _, args := range [][]string{
			{"tasks", "list"},
			{"tasks", "get", skewedTaskID},
			{"dlq", "list"},
			{"dlq", "summary"},
			{"nodes"},
		} {
			st, out, errOut := cli(t, "", append(args, "--server", s.url)...)
			if st != exitOK {
				t.Fatalf("retryq %s: status %d, stderr %s", strings.Join(args, " "), st, errOut)
			}
			if !strings.Contains(out, "5m ago") || strings.Contains(out, "3h") || strings.Contains(out, "2h") {
				t.Errorf("retryq %s against a server %v behind: want ages on its clock (5m ago):\n%s",
					strings.Join(args, " "), skew, out)
			}
		}
	}
}

// TestSinceAgoIsTakenOnTheServersClock: --since given as a duration ago
// (dlq list, dlq summary, dlq redrive, nodes) is turned into a time on the
// server's clock, which stamps the deaths and heartbeats it filters. It
// was taken on this machine's clock: against a server 3 hours behind,
// --since 1h asked for what died in the 2 hours to come, and found nothing.
func TestSinceAgoIsTakenOnTheServersClock(t *testing.T) {
	const skew = 3 * time.Hour
	s := startSkewedServer(t, skew)
	for _, c := range []struct {
		args  []string
		route string
	}{
		{[]string{"dlq", "list", "--since", "1h"}, "GET /v1/dlq"},
		{[]string{"dlq", "summary", "--since", "1h"}, "GET /v1/dlq/summary"},
		{[]string{"dlq", "redrive", "--since", "1h", "--yes"}, "POST /v1/dlq/redrive"},
		{[]string{"nodes", "--since", "1h"}, "GET /v1/nodes"},
	} {
		st, out, errOut := cli(t, "", append(c.args, "--server", s.url)...)
		if st != exitOK {
			t.Fatalf("retryq %s: status %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), st, out, errOut)
		}
		want := time.Now().Add(-skew - time.Hour)
		if got := s.since(t, c.route); got.Before(want.Add(-10*time.Second)) || got.After(want.Add(10*time.Second)) {
			t.Errorf("retryq %s: since %v, want about %v (an hour ago on the server's clock)",
				strings.Join(c.args, " "), got, want.UTC())
		}
	}
	// An RFC 3339 time is sent as it is.
	s.cliSince(t, "2024-05-01T12:00:00Z")
}

// cliSince runs dlq list --since v and checks the time sent is v.
func (s *skewedServer) cliSince(t *testing.T, v string) {
	t.Helper()
	if st, _, errOut := cli(t, "", "dlq", "list", "--since", v, "--server", s.url); st != exitOK {
		t.Fatalf("dlq list --since %s: status %d, stderr %s", v, st, errOut)
	}
	want, _ := time.Parse(time.RFC3339, v)
	if got := s.since(t, "GET /v1/dlq"); !got.Equal(want) {
		t.Errorf("dlq list --since %s: sent %v", v, got)
	}
}

// TestServerClockKeepsALocalClockThatAgreesWithTheDateHeader: the Date
// header only tells the second; a local clock within what the header and
// the round trip allow is kept as it is (finer), one outside is moved to
// the nearest time the header allows.
func TestServerClockKeepsALocalClockThatAgreesWithTheDateHeader(t *testing.T) {
	date := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	hdr := date.Format(http.TimeFormat)
	for _, c := range []struct {
		name      string
		got       time.Time
		rtt       time.Duration
		wantLocal time.Time
	}{
		{"local clock agrees", date.Add(700 * time.Millisecond), 10 * time.Millisecond, date.Add(700 * time.Millisecond)},
		{"within the round trip", date.Add(1500 * time.Millisecond), time.Second, date.Add(1500 * time.Millisecond)},
		{"local clock behind", date.Add(-time.Hour), 10 * time.Millisecond, date},
		{"local clock ahead", date.Add(time.Hour), 10 * time.Millisecond, date.Add(time.Second + 10*time.Millisecond)},
	} {
		var sc serverClock
		sc.observe(hdr, c.got.Add(-c.rtt), c.got)
		if !sc.known || !sc.at.Equal(c.wantLocal) {
			t.Errorf("%s: server time %v, want %v", c.name, sc.at, c.wantLocal)
		}
	}
	var sc serverClock
	sc.observe("not a date", date, date)
	sc.observe("", date, date)
	if sc.known {
		t.Errorf("an unreadable or missing Date header was taken: %v", sc.at)
	}
	if d := time.Since(sc.now()); d < 0 || d > time.Minute {
		t.Errorf("without a Date header now() is %v from this machine's clock", d)
	}
}
