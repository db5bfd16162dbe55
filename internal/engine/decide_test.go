package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsCharacters(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},   // é is 2 bytes: not cut in half
		{"a✓b", 3, "a"},  // ✓ is 3 bytes
		{"a✓b", 4, "a✓"}, // fits whole
		{"✓✓", 1, ""},    // nothing whole fits
		{strings.Repeat("é", 3000), maxMessageLen, strings.Repeat("é", maxMessageLen/2)},
	} {
		got := truncate(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) || len(got) > c.n {
			t.Errorf("truncate(%.20q, %d) = %.20q (%d bytes), want %.20q", c.in, c.n, got, len(got), c.want)
		}
	}
}
