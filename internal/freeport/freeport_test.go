package freeport

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// TestPortOutsideTheEphemeralRange: where the kernel says which ports it
// hands to outgoing connections, Port returns a free one outside them.
func TestPortOutsideTheEphemeralRange(t *testing.T) {
	lo, hi, ok := ephemeralRange()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if ok && p >= lo && p <= hi && len(candidates(lo, hi)) > 0 {
		t.Errorf("Port() = %d, inside the ephemeral range %d-%d", p, lo, hi)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("listen on the port Port returned: %v", err)
	}
	l.Close()
}

// TestCandidates: ports above the range come first, then those below it
// down to 1024, none inside it, at most tries of them.
func TestCandidates(t *testing.T) {
	for _, r := range [][2]int{{32768, 60999}, {1024, 65535}, {1024, 65500}, {1100, 65535}, {1050, 65500}} {
		lo, hi := r[0], r[1]
		got := candidates(lo, hi)
		outside := (65535 - hi) + (lo - 1024)
		if len(got) != min(outside, tries) {
			t.Errorf("%d-%d: %d candidates, want %d", lo, hi, len(got), min(outside, tries))
		}
		if slices.ContainsFunc(got, func(p int) bool { return p >= lo && p <= hi || p < 1024 || p > 65535 }) {
			t.Errorf("%d-%d: candidates %v hold a port inside the range or out of bounds", lo, hi, got)
		}
		above := min(65535-hi, tries)
		for i, p := range got {
			if (i < above) != (p > hi) {
				t.Errorf("%d-%d: candidate %d is %d: the %d above the range come first", lo, hi, i, p, above)
				break
			}
		}
	}
}
