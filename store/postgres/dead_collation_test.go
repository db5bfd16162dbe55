package postgres

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// icuDatabase creates, next to the test database at base, a database whose
// default collation is ICU's English one (case and punctuation sort as in
// a dictionary, not by bytes, as on many production servers), dropped when
// t ends; it skips when the server has no ICU.
func icuDatabase(t *testing.T, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	name := conn.Config().Database + "_icu"
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en'"); err != nil {
		t.Skipf("no ICU database on this server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// TestDeadSummaryTiesInByteOrderWhateverTheCollation: groups of one size
// come in byte order of type, then error code, as the storage contract
// says and as SQLite orders them, even when the database's default
// collation is not C: error codes are stored with that default collation.
func TestDeadSummaryTiesInByteOrderWhateverTheCollation(t *testing.T) {
	s := openURL(t, icuDatabase(t, pgtest.URL(t)), nil)
	ctx := context.Background()
	codes := []string{"ab", "aB", "a_b", "Ab"} // bytewise: Ab < aB < a_b < ab
	var tasks []store.NewTask
	for i := range codes {
		tasks = append(tasks, store.NewTask{ID: fmt.Sprintf("t%d", i), Type: "x", Payload: []byte(`{}`)})
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: t0}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.FetchTasks(ctx, store.FetchParams{Limit: len(tasks), WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(leased) != len(tasks) {
		t.Fatalf("FetchTasks: %d tasks, %v", len(leased), err)
	}
	var outs []store.Outcome
	for _, l := range leased {
		var i int
		if _, err := fmt.Sscanf(l.ID, "t%d", &i); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, store.Outcome{TaskID: l.ID, LeaseID: l.LeaseID, State: store.StateDead,
			Error: &store.ErrorInfo{Code: codes[i], Message: "no", Class: "permanent"}, DeadReason: store.DeadNonRetryable,
			OutcomeKind: store.OutcomeFailed})
	}
	errs, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: outs, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("outcome %d: %v", i, e)
		}
	}
	gs, err := s.DeadSummary(ctx, store.SummaryParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range gs.Groups {
		got = append(got, g.ErrorCode)
	}
	if want := []string{"Ab", "aB", "a_b", "ab"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DeadSummary codes in order %q, want %q", got, want)
	}
}
