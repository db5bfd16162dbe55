package store

import (
	"testing"
	"time"
)

// w is a write for the Holder tests: an insert, an outcome (holdable) or
// another write.
type w struct {
	name string
	kind byte // 'i' insert, 'o' outcome, 'f' other (a fetch, say)
}

func isInsert(x *w) bool  { return x.kind == 'i' }
func isOutcome(x *w) bool { return x.kind == 'o' }

func names(ws []*w) string {
	s := ""
	for _, x := range ws {
		s += x.name + " "
	}
	return s
}

func TestHolderSplit(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var h Holder[*w]
	split := func(now time.Time, group ...*w) string {
		return names(h.Split(group, now, isInsert, isOutcome))
	}
	i1, i2, i3, o1, o2, f1 := &w{"i1", 'i'}, &w{"i2", 'i'}, &w{"i3", 'i'}, &w{"o1", 'o'}, &w{"o2", 'o'}, &w{"f1", 'f'}

	if got := split(t0, o1, i1, f1); got != "i1 f1 " {
		t.Fatalf("group with an insert: sent %q, want the insert and the other write", got)
	}
	if !h.Held() || h.Len() != 1 {
		t.Fatalf("held %d writes, want the outcome", h.Len())
	}
	// More inserts within OutcomeHold: the held write stays, the new
	// outcome joins it.
	if got := split(t0.Add(OutcomeHold-time.Microsecond), i2, o2); got != "i2 " {
		t.Fatalf("before OutcomeHold: sent %q, want the insert alone", got)
	}
	// OutcomeHold after the first was held: everything held goes out
	// first, in order, with the group.
	if got := split(t0.Add(OutcomeHold), i3); got != "o1 o2 i3 " {
		t.Fatalf("at OutcomeHold: sent %q", got)
	}
	if h.Held() {
		t.Fatal("still holding after the release")
	}

	// A group without inserts, or no group at all, takes the held writes
	// along at once.
	split(t0, i1, o1)
	if got := split(t0); got != "o1 " {
		t.Fatalf("empty group: sent %q, want the held write", got)
	}
	split(t0, i1, o1)
	if got := split(t0, o2, f1); got != "o1 o2 f1 " {
		t.Fatalf("group without inserts: sent %q", got)
	}

	// Never MaxHeldWrites or more held.
	for i := 0; i < 3*MaxHeldWrites+1; i++ {
		split(t0, i1, &w{"o", 'o'})
		if h.Len() >= MaxHeldWrites {
			t.Fatalf("%d writes held", h.Len())
		}
	}
	if got := h.Release(nil); len(got) == 0 || h.Held() {
		t.Fatalf("Release returned %d writes and left %d held", len(got), h.Len())
	}
}
