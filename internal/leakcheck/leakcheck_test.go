package leakcheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSettledSeesAFileLeftOpen: a file opened after the baseline and
// left open is a descriptor more; once closed, the count is settled.
func TestSettledSeesAFileLeftOpen(t *testing.T) {
	if !FDsKnown() {
		t.Skip("descriptors are counted on Linux only")
	}
	b := Take(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	if extra := added(b.fds, openFDs()); len(extra) != 1 || extra[0] != f.Name() {
		t.Fatalf("added = %v, want [%s]", extra, f.Name())
	}
	_ = f.Close()
	b.Settled(t, time.Second, "closing the file")
}

// TestAddedCountsReusedTargets: two descriptors on one target where the
// baseline had one are one more, and a socket replaced by another is none.
func TestAddedCountsReusedTargets(t *testing.T) {
	got := added([]string{"a", "socket:[1]"}, []string{"socket:[2]", "a", "a", "socket:[3]"})
	if len(got) != 2 || got[0] != "a" || got[1] != "socket:[3]" {
		t.Fatalf("added = %v, want [a socket:[3]]", got)
	}
	if got := added(nil, []string{"a"}); got != nil {
		t.Fatalf("added with no baseline = %v, want nil", got)
	}
}
