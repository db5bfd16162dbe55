package postgres

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// rowsOf returns insert rows of the given types, state pending unless the
// type starts with "running:".
func rowsOf(types ...string) insertRows {
	r := make(insertRows, len(types))
	for i, typ := range types {
		state := store.StatePending
		if rest, ok := strings.CutPrefix(typ, "running:"); ok {
			typ, state = rest, store.StateRunning
		}
		r[i] = insertRow{typ: typ, state: string(state)}
	}
	return r
}

// TestDuePayload: an insert's notification names the distinct types of
// the tasks it made due, in a form that reads back whole whatever the
// names hold; past 8 types or PostgreSQL's payload bound it names none.
func TestDuePayload(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []insertRows
		want  []string // nil: the payload names no type
	}{
		{"one type", []insertRows{rowsOf("email", "email")}, []string{"email"}},
		{"spaces and digits", []insertRows{rowsOf("a b", "12 x", "é")}, []string{"a b", "12 x", "é"}},
		{"across parts", []insertRows{rowsOf("a"), rowsOf("b", "a")}, []string{"a", "b"}},
		{"leased at insert", []insertRows{rowsOf("running:a", "b")}, []string{"b"}},
		{"all leased", []insertRows{rowsOf("running:a")}, nil},
		{"eight types", []insertRows{rowsOf("1", "2", "3", "4", "5", "6", "7", "8")}, []string{"1", "2", "3", "4", "5", "6", "7", "8"}},
		{"nine types", []insertRows{rowsOf("1", "2", "3", "4", "5", "6", "7", "8", "9")}, nil},
		{"too long", []insertRows{rowsOf(strings.Repeat("x", 4000), strings.Repeat("y", 4000))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := duePayload(tc.parts...)
			if len(p) > maxNotifyPayload {
				t.Fatalf("payload of %d bytes, over the bound", len(p))
			}
			got, ok := parseDuePayload(p)
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("payload %q reads back %q, %v; want %q", p, got, ok, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "due ", "due x", "due 3 ab", "due 0 ", "due -1 a", "due 1 a2", "cancel 1 ab"} {
		if got, ok := parseDuePayload(bad); ok || got != nil {
			t.Errorf("parseDuePayload(%q) = %q, %v; want nil, false", bad, got, ok)
		}
	}
}

// FuzzParseDuePayload: any payload parses without panicking, into at most
// 8 types that encode back to the same payload.
func FuzzParseDuePayload(f *testing.F) {
	for _, s := range []string{"due 5 email", "due 3 a b1 c", "due 1", "due 99999999999999999999 a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		types, ok := parseDuePayload(p)
		if !ok {
			return
		}
		if len(types) > maxDueNotifyTypes {
			t.Fatalf("%d types", len(types))
		}
		var parts []insertRows
		for _, typ := range types {
			parts = append(parts, insertRows{{typ: typ, state: string(store.StatePending)}})
		}
		if back := duePayload(parts...); back != p && len(p) <= maxNotifyPayload && !repeats(types) {
			t.Fatalf("%q parses to %q, which encodes to %q", p, types, back)
		}
	})
}

// repeats reports whether types names one type twice.
func repeats(types []string) bool {
	return len(slices.Compact(slices.Sorted(slices.Values(types)))) != len(types)
}

// TestTypedWakeupsNameTheInsertedTypes: the notification of an insert,
// keyed or not, names the types of the tasks it made due; a batch of more
// types, a release and a reconnect name none (any type).
func TestTypedWakeupsNameTheInsertedTypes(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t), nil)
	ctx := t.Context()
	wake, due := s.TypedWakeups(ctx)
	waitWakeup(t, wake, "listener up")
	if types, all := due.Take(); !all {
		t.Fatalf("the listener's first connection recorded %q, want any type", types)
	}
	now := time.Now()
	check := func(what string, want []string) {
		t.Helper()
		waitWakeup(t, wake, what)
		types, all := due.Take()
		slices.Sort(types)
		if all != (want == nil) || !slices.Equal(types, want) {
			t.Fatalf("%s: the notification named %q (any type: %v), want %q", what, types, all, want)
		}
	}
	insert := func(tasks ...store.NewTask) {
		t.Helper()
		if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: tasks, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	insert(store.NewTask{ID: "k1", Type: "tw a"}, store.NewTask{ID: "k2", Type: "tw.b"}, store.NewTask{ID: "k3", Type: "tw a"})
	check("a keyless insert", []string{"tw a", "tw.b"})
	insert(store.NewTask{ID: "k4", Type: "tw.keyed", IdempotencyKey: "key-4"})
	check("a keyed insert", []string{"tw.keyed"})
	var many []store.NewTask
	for i := range maxDueNotifyTypes + 1 {
		many = append(many, store.NewTask{ID: "m" + string(rune('a'+i)), Type: "tw.m" + string(rune('a'+i))})
	}
	insert(many...)
	check("an insert of 9 types", nil)
	got, err := s.FetchTasks(ctx, store.FetchParams{Types: []string{"tw.b"}, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if _, err := s.RecordOutcomes(ctx, store.OutcomeParams{Outcomes: []store.Outcome{{TaskID: got[0].ID, LeaseID: got[0].LeaseID, State: store.StatePending}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	check("a release", nil)
}
