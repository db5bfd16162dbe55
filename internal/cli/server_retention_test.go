package cli

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestRetentionFlagNeedsAUnit: a retention is a duration with a unit (days
// included), "forever" or a negative duration (kept forever), or 0 (the
// default). A plain number is refused: it used to be seconds, so
// "--dead-retention 30", meant as 30 days, deleted the dead-letter queue
// every 30 seconds.
func TestRetentionFlagNeedsAUnit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"30d", 30 * 24 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"720h", 720 * time.Hour},
		{"90m", 90 * time.Minute},
		{"45s", 45 * time.Second},
		{"forever", -1},
		{"Forever", -1},
		{"-1s", -1},
		{"-1d", -1},
		{"-1", -1},
		{"0", 0},
		{"0s", 0},
		{"0d", 0},
	} {
		got, err := parseRetention(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"30", "2592000", "0.5", "+30"} {
		if _, err := parseRetention(in); !errors.Is(err, errRetentionNoUnit) {
			t.Errorf("parseRetention(%q): err %v, want %v", in, err, errRetentionNoUnit)
		}
	}
	for _, in := range []string{"", "d", "30x", "30 d", "1d-2h", "1d+2h", "1d2", "never", "1e3", "0.1ns", "300000d", "106751d24h", "106752d"} {
		if d, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) = %v, want an error", in, d)
		}
	}
}

// TestServerRetentionFlags: the server refuses a retention without a unit
// and a dead-letter retention under an hour unless
// --allow-short-dead-retention is given, naming the flag (status 2);
// --cancelled-retention follows --succeeded-retention unless given (or
// given as 0, the default).
func TestServerRetentionFlags(t *testing.T) {
	env := func() (*Env, *strings.Builder) {
		var stderr strings.Builder
		return &Env{Stdin: strings.NewReader(""), Stdout: &strings.Builder{}, Stderr: &stderr,
			Getenv: func(string) string { return "" }}, &stderr
	}
	for _, tc := range []struct {
		args []string
		want string // in the usage error
	}{
		{[]string{"--dead-retention", "30"}, "--dead-retention: \"30\" needs a unit"},
		{[]string{"--succeeded-retention", "86400"}, "--succeeded-retention: \"86400\" needs a unit"},
		{[]string{"--cancelled-retention", "7"}, "write 7d for days"},
		{[]string{"--dead-retention", "30s"}, "--dead-retention: 30s would delete dead tasks"},
		{[]string{"--dead-retention", "59m59s"}, "--allow-short-dead-retention"},
		{[]string{"--dead-retention", "30days"}, "want a duration with a unit"},
	} {
		e, stderr := env()
		if o, st := parseServer(e, tc.args); o != nil || st != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: status %d, stderr %q; want status %d and %q", tc.args, st, stderr.String(), exitUsage, tc.want)
		}
	}
	for _, tc := range []struct {
		args                       []string
		succeeded, cancelled, dead time.Duration
	}{
		{nil, 0, 0, 0}, // the engine's defaults
		{[]string{"--dead-retention", "1h"}, 0, 0, time.Hour},
		{[]string{"--dead-retention", "30s", "--allow-short-dead-retention"}, 0, 0, 30 * time.Second},
		{[]string{"--dead-retention", "forever"}, 0, 0, -1},
		{[]string{"--dead-retention=-1s"}, 0, 0, -1},
		{[]string{"--succeeded-retention", "2h"}, 2 * time.Hour, 2 * time.Hour, 0},
		{[]string{"--succeeded-retention", "2h", "--cancelled-retention", "7d"}, 2 * time.Hour, 7 * 24 * time.Hour, 0},
		{[]string{"--cancelled-retention", "forever"}, 0, -1, 0},
		// 0 takes the default, which for cancelled tasks is the succeeded one.
		{[]string{"--succeeded-retention", "2h", "--cancelled-retention", "0"}, 2 * time.Hour, 2 * time.Hour, 0},
		{[]string{"--cancelled-retention", "0s", "--succeeded-retention", "forever"}, -1, -1, 0},
	} {
		e, stderr := env()
		o, st := parseServer(e, tc.args)
		if o == nil {
			t.Errorf("%q: status %d, stderr %q", tc.args, st, stderr.String())
			continue
		}
		r := o.retention
		if r.succeeded != tc.succeeded || r.cancelled != tc.cancelled || r.dead != tc.dead {
			t.Errorf("%q: retention %v/%v/%v, want %v/%v/%v", tc.args, r.succeeded, r.cancelled, r.dead,
				tc.succeeded, tc.cancelled, tc.dead)
		}
	}
}

// TestServerRefusesDeadRetentionInSeconds: "retryq server --dead-retention
// 30" refuses to start, before the database is opened, instead of running
// a server that deletes every dead task 30 seconds after it died.
func TestServerRefusesDeadRetentionInSeconds(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "r.db")
	status, log := runServerBriefly(t, "--db", "sqlite:"+path, "--listen", "127.0.0.1:0", "--dead-retention", "30")
	if status != exitUsage || !strings.Contains(log, "--dead-retention") {
		t.Errorf("status %d, want %d and an error naming --dead-retention; log:\n%s", status, exitUsage, log)
	}
	noFile(t, path, "--dead-retention 30")
}

// seedFinished creates task id of type typ in s, finished (state st) age
// ago: every store call is made at that time.
func seedFinished(t *testing.T, ctx context.Context, s store.Store, id, typ string, st store.State, age time.Duration) {
	t.Helper()
	now := time.Now().Add(-age)
	n := store.NewTask{ID: id, Type: typ, Payload: []byte(`{}`)}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: []store.NewTask{n}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if st == store.StateCancelled {
		if _, err := s.CancelTask(ctx, store.CancelParams{ID: id, Now: now}); err != nil {
			t.Fatal(err)
		}
		return
	}
	ts, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{typ}, Limit: 1, WorkerID: "seed", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(ts) != 1 {
		t.Fatalf("fetch %s: %v, %d tasks", id, err, len(ts))
	}
	o := store.Outcome{TaskID: id, LeaseID: ts[0].LeaseID, State: st, OutcomeKind: store.OutcomeSucceeded}
	if st == store.StateDead {
		o.DeadReason, o.OutcomeKind = store.DeadNonRetryable, store.OutcomeFailed
		o.Error = &store.ErrorInfo{Code: "400", Message: "bad input", Class: "permanent"}
	}
	errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{o}, Now: now})
	if err != nil || errs[0] != nil {
		t.Fatalf("outcome of %s: %v %v", id, err, errs)
	}
}

// TestServerRetentionDeletesAndCountsAsDocumented: a server started with
// short (but allowed) retentions deletes at its first scheduler pass
// exactly the finished tasks older than their class's retention, keeps
// the others, logs the retention in force and the counts it deleted, and
// reports them in GET /v1/stats (docs/operations.md, Retention).
func TestServerRetentionDeletesAndCountsAsDocumented(t *testing.T) {
	clearServerEnv(t)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "retention.db")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, k := range []struct {
		id    string
		state store.State
		age   time.Duration
		gone  bool
	}{
		{"dead-old", store.StateDead, 3 * time.Hour, true},
		{"dead-new", store.StateDead, 30 * time.Minute, false},
		{"cancelled-old", store.StateCancelled, 3 * time.Hour, true},
		{"cancelled-new", store.StateCancelled, time.Hour, false},
		{"succeeded-old", store.StateSucceeded, 3 * time.Hour, false},
	} {
		seedFinished(t, ctx, st, k.id, "ret."+k.id, k.state, k.age)
		gone[k.id] = k.gone
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s := launchServer(t, "server", "--db", "sqlite:"+path, "--listen", "127.0.0.1:0",
		"--dead-retention", "1h", "--cancelled-retention", "2h", "--succeeded-retention", "1d")
	addr := s.started(t)
	startLine := regexp.MustCompile(`msg="retryq server started".*retention.succeeded=1d retention.cancelled=2h0m0s retention.dead=1h0m0s`)
	if !startLine.MatchString(s.stderr.String()) {
		t.Errorf("the start-up line does not show the retention in force; log:\n%s", s.stderr.String())
	}
	// The deletions commit, and so count in the stats, a moment before
	// their log line is written: wait for both.
	var stats apiStatsAnswer
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if getJSON(t, addr, "/v1/stats", &stats) != 200 {
			t.Fatal("GET /v1/stats failed")
		}
		rd := stats.Overall.RetentionDeleted
		logged := strings.Contains(s.stderr.String(), `msg="retention deleted finished tasks"`)
		if rd["dead"]+rd["cancelled"] >= 2 && logged || i >= 3000 || time.Now().After(deadline) {
			break
		}
		s.wait(10 * time.Millisecond)
	}
	if rd := stats.Overall.RetentionDeleted; rd["dead"] != 1 || rd["cancelled"] != 1 || rd["succeeded"] != 0 {
		t.Errorf("retention_deleted %v, want dead 1, cancelled 1, succeeded 0; log:\n%s", rd, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), `msg="retention deleted finished tasks" succeeded=0 cancelled=1 dead=1`) {
		t.Errorf("no log line with the counts deleted; log:\n%s", s.stderr.String())
	}
	for id, want := range gone {
		code := getJSON(t, addr, "/v1/tasks/"+id, nil)
		if want && code != 404 || !want && code != 200 {
			t.Errorf("GET /v1/tasks/%s: %d, want it %s", id, code, map[bool]string{true: "deleted", false: "kept"}[want])
		}
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("server exited with status %d", code)
	}
}

// TestServerNodeRetentionFlag: --node-retention takes a retention like the
// others (a unit needed, forever allowed) and reaches the engine's config.
func TestServerNodeRetentionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 0}, // the engine's default
		{[]string{"--node-retention", "2d"}, 48 * time.Hour},
		{[]string{"--node-retention", "forever"}, -1},
		{[]string{"--node-retention", "1m"}, time.Minute},
	} {
		var stderr strings.Builder
		e := &Env{Stdin: strings.NewReader(""), Stdout: &strings.Builder{}, Stderr: &stderr, Getenv: func(string) string { return "" }}
		o, st := parseServer(e, tc.args)
		if o == nil {
			t.Errorf("%q: status %d, stderr %q", tc.args, st, stderr.String())
			continue
		}
		if o.retention.nodes != tc.want {
			t.Errorf("%q: node retention %v, want %v", tc.args, o.retention.nodes, tc.want)
		}
	}
	// A plain number, and a retention under a minute, which would delete
	// the registry rows of live nodes (each writes its row every 5 s) at
	// every retention pass: refused before the database is opened, naming
	// the flag, rather than by the engine after it.
	for _, v := range []string{"7", "1s", "59s", "1ns"} {
		var stderr strings.Builder
		e := &Env{Stdin: strings.NewReader(""), Stdout: &strings.Builder{}, Stderr: &stderr, Getenv: func(string) string { return "" }}
		if o, st := parseServer(e, []string{"--node-retention", v}); o != nil || st != exitUsage || !strings.Contains(stderr.String(), "--node-retention") {
			t.Errorf("--node-retention %s: status %d, stderr %q; want a usage error naming the flag", v, st, stderr.String())
		}
	}
}
