package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

func TestHolderSplit(t *testing.T) {
	ins := func() *groupWrite { return &groupWrite{ins: &insertRows{}} }
	out := func() *groupWrite { return &groupWrite{} }
	t0 := time.Unix(1_800_000_000, 0)

	var h holder
	i1, o1 := ins(), out()
	if got := h.split([]*groupWrite{o1, i1}, t0); len(got) != 1 || got[0] != i1 {
		t.Fatalf("group with an insert: sent %v, want the insert alone", got)
	}
	if !h.held() {
		t.Fatal("the outcome write is not held")
	}
	// More inserts within outcomeHold: the held write stays, the new
	// outcome write joins it.
	i2, o2 := ins(), out()
	if got := h.split([]*groupWrite{i2, o2}, t0.Add(outcomeHold-time.Microsecond)); len(got) != 1 || got[0] != i2 {
		t.Fatalf("before outcomeHold: sent %v, want the insert alone", got)
	}
	// outcomeHold after the first was held: everything held goes out
	// first, in order, with the group.
	i3 := ins()
	got := h.split([]*groupWrite{i3}, t0.Add(outcomeHold))
	if len(got) != 3 || got[0] != o1 || got[1] != o2 || got[2] != i3 {
		t.Fatalf("at outcomeHold: sent %v, want o1 o2 i3", got)
	}
	if h.held() {
		t.Fatal("still holding after the release")
	}

	// A group without inserts, or no group at all, takes the held writes
	// along at once.
	h.split([]*groupWrite{ins(), o1}, t0)
	if got := h.split(nil, t0); len(got) != 1 || got[0] != o1 {
		t.Fatalf("empty group: sent %v, want the held write", got)
	}
	h.split([]*groupWrite{ins(), o1}, t0)
	if got := h.split([]*groupWrite{o2}, t0); len(got) != 2 || got[0] != o1 || got[1] != o2 {
		t.Fatalf("group of outcomes: sent %v, want o1 o2", got)
	}

	// Never more than maxHeldWrites held.
	for i := 0; i < 3*maxHeldWrites; i++ {
		h.split([]*groupWrite{ins(), out()}, t0)
		if len(h.writes) >= maxHeldWrites {
			t.Fatalf("%d writes held", len(h.writes))
		}
	}
}

// TestOutcomeHeldFromInsertGroup: an outcome batch queued beside an
// insert is left out of the insert's commit and sent right after it, on
// its own, since nothing else follows: two commits where there used to be
// one, and the outcome is applied.
func TestOutcomeHeldFromInsertGroup(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	ctx := t.Context()
	now := time.Now()
	task := leased(t, s, "h", 1, now)[0]

	x := connect(t, url)
	if _, err := x.Exec(ctx, "SELECT pg_advisory_lock(1)"); err != nil {
		t.Fatal(err)
	}
	blocker := lockWrite(ctx, 1) // keeps the writer busy while the two queue up
	s.wq.push(blocker)
	waitAdvisoryWaiter(t, x)

	inserted := make(chan error, 1)
	go func() {
		_, err := s.InsertTasks(context.Background(), store.InsertParams{Tasks: newTasks("h-new", 1), Now: now})
		inserted <- err
	}()
	waitQueued(t, s, 1)
	recorded := make(chan []error, 1)
	go func() {
		errs, err := s.RecordOutcomes(context.Background(), store.OutcomeParams{Now: now, Outcomes: []store.Outcome{{
			TaskID: task.ID, LeaseID: task.LeaseID, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded}}})
		if err != nil {
			errs = []error{err}
		}
		recorded <- errs
	}()
	waitQueued(t, s, 2)
	before := s.GroupStats()
	if _, err := x.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	if err := <-blocker.done; err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	select {
	case err := <-inserted:
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	case <-timeout:
		t.Fatal("the insert never committed")
	}
	select {
	case errs := <-recorded:
		if errs[0] != nil {
			t.Fatalf("outcome: %v", errs[0])
		}
	case <-timeout:
		t.Fatal("the held outcome was never sent")
	}
	after := s.GroupStats()
	// The blocker's group is counted when its statements return, after the
	// snapshot; the insert and the outcome went out in two more.
	if n := after.Groups - before.Groups; n != 3 {
		t.Fatalf("%d groups from the blocker, the insert and the outcome; want 3 (the outcome held out of the insert's group)", n)
	}
	if got, err := s.GetTask(ctx, task.ID); err != nil || got.State != store.StateSucceeded {
		t.Fatalf("task after the outcome: %v %v", got.State, err)
	}
}

func TestLingerTargetCountsInserts(t *testing.T) {
	ins := &groupWrite{ins: &insertRows{}}
	out := &groupWrite{}
	for _, c := range []struct {
		group  []*groupWrite
		queued int
		want   int
	}{
		{nil, 3, 0},
		{[]*groupWrite{out, out}, 3, 0},                // outcomes alone: no wait
		{[]*groupWrite{ins}, 0, 1},                     // a lone producer: YieldUntil skips want 1
		{[]*groupWrite{out, out, ins, ins, ins}, 2, 5}, // released outcomes do not count
	} {
		if got := lingerTarget(c.group, c.queued); got != c.want {
			t.Errorf("lingerTarget(%d writes, %d queued) = %d, want %d", len(c.group), c.queued, got, c.want)
		}
	}
}
