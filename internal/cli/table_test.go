package cli

import (
	"strings"
	"testing"
	"time"
)

func TestTableAlignment(t *testing.T) {
	tb := newTable("NAME", "COUNT", "NOTE").alignRight(1)
	tb.add("a", "1", "first")
	tb.add("längere", "1234", "line\nbreak\x1b[31m")
	tb.add("b")
	var b strings.Builder
	tb.write(&b)
	want := "" +
		"NAME     COUNT  NOTE\n" +
		"a            1  first\n" +
		"längere   1234  line break [31m\n" +
		"b\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFormatting(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct{ got, want string }{
		{fmtRelTime(now.Add(30*time.Second), now), "in 30s"},
		{fmtRelTime(now.Add(-3*time.Hour), now), "3h ago"},
		{fmtRelTime(now.Add(-72*time.Hour), now), "3d ago"},
		{fmtRelTime(now, now), "now"},
		{fmtSeconds(0.25), "250ms"},
		{fmtSeconds(2.5), "2.5s"},
		{fmtSeconds(600), "10m0s"},
		{fmtPercent(0.0686), "6.9%"},
		{cleanCell("abcdef", 4), "abc…"},
		{shellQuote("a b'c"), `'a b'\''c'`},
		{shellQuote("email.send"), "email.send"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestTailBufferLastLine(t *testing.T) {
	tb := &tailBuffer{max: 32}
	tb.Write([]byte("first line\nsecond\n"))
	tb.Write([]byte("the real error\n\n  \n"))
	if got := tb.lastLine(); got != "the real error" {
		t.Errorf("lastLine = %q", got)
	}
	big := &tailBuffer{max: 8}
	big.Write([]byte(strings.Repeat("x", 100) + "\nabc"))
	if got := big.lastLine(); got != "abc" || len(big.b) != 8 {
		t.Errorf("bounded tail: %q (%d bytes kept)", got, len(big.b))
	}
}
