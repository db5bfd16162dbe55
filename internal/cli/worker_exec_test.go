package cli

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// escapeSequence builds a well-formed terminal escape sequence of the kind
// picked by kind, with body filtered to the bytes that kind allows.
func escapeSequence(kind byte, body string) string {
	keep := func(lo, hi byte) string {
		var b strings.Builder
		for i := 0; i < len(body) && b.Len() < 8; i++ {
			if body[i] >= lo && body[i] <= hi {
				b.WriteByte(body[i])
			}
		}
		return b.String()
	}
	last := byte('m')
	if len(body) > 0 {
		last = body[len(body)-1]
	}
	switch kind % 8 {
	case 0: // CSI: colours, cursor moves
		return "\x1b[" + keep(0x30, 0x3f) + string(rune(0x40+last%0x3f))
	case 1: // OSC ended by BEL: a window title, a hyperlink
		return "\x1b]" + keep(0x20, 0x7e) + "\a"
	case 2: // OSC ended by ST
		return "\x1b]" + keep(0x20, 0x5b) + "\x1b\\"
	case 3: // nF: character set designation, as tput sgr0 writes ("\x1b(B")
		return "\x1b" + string(rune(0x21+last%0x0f)) + string(rune(0x30+last%0x4f))
	case 4: // Fp / Fe / Fs: two bytes ("ESC 7" saves the cursor)
		c := 0x30 + last%0x4f
		if strings.IndexByte("P[]X^_", c) >= 0 {
			// These open a longer sequence (DCS, CSI, OSC, SOS, PM,
			// APC) that the text after them would continue.
			c = '7'
		}
		return "\x1b" + string(rune(c))
	case 5: // C1 CSI
		return "\u009b" + keep(0x30, 0x3f) + string(rune(0x40+last%0x3f))
	case 6: // C1 OSC ended by C1 ST
		return "\u009d" + keep(0x20, 0x7e) + "\u009c"
	default: // DCS, SOS, PM or APC, ended by ST
		return []string{"\x1bP", "\u0098", "\u009e", "\u009f"}[last%4] + keep(0x20, 0x7e) + []string{"\x1b\\", "\u009c"}[last%2]
	}
}

// TestLastLineDropsCharacterSetEscapes: the message of a failed command
// has no remnant of the escape sequences colouring its output, including
// the character set designation "ESC ( B" that tput sgr0 writes; it used
// to leave "(B" in the message the DLQ shows.
func TestLastLineDropsCharacterSetEscapes(t *testing.T) {
	tb := &tailBuffer{max: 4096}
	_, _ = tb.Write([]byte("\x1b[31merror: disk full\x1b(B\x1b[m\n"))
	if got := tb.lastLine(); got != "error: disk full" {
		t.Errorf("lastLine = %q, want %q", got, "error: disk full")
	}
}

// FuzzLastLine: the message a worker reports for a failed command's
// stderr is printable text of at most maxMessageRunes runes without
// surrounding space, and a well-formed escape sequence anywhere in a line
// leaves no trace: the message is the one of the line without it.
func FuzzLastLine(f *testing.F) {
	for _, s := range []struct {
		prefix string
		kind   byte
		body   string
		suffix string
	}{
		{"error: ", 0, "31m", "disk full"},
		{"", 1, "8;;http://x/", "link"},
		{"a", 2, "0;title", "b"},
		{"failed", 3, "(B", ""},
		{"x\ry", 4, "M", "z\n"},
		{"\xe2\x82", 5, "1;2H", "\u202eevil"},
		{strings.Repeat("é", 1200), 0, "m", ""},
		{"disk ", 6, "0;title", "full"},
		{"disk ", 7, "q#0;2", "full"},
	} {
		f.Add(s.prefix, s.kind, s.body, s.suffix)
	}
	f.Fuzz(func(t *testing.T, prefix string, kind byte, body, suffix string) {
		lastLine := func(s string) string {
			tb := &tailBuffer{max: stderrTailBytes}
			_, _ = tb.Write([]byte(s))
			return tb.lastLine()
		}
		esc := escapeSequence(kind, body)
		got := lastLine(prefix + esc + suffix)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > maxMessageRunes || strings.TrimSpace(got) != got {
			t.Fatalf("lastLine(%q) = %q", prefix+esc+suffix, got)
		}
		for _, r := range got {
			if unprintable(r) {
				t.Fatalf("lastLine(%q) = %q holds %U", prefix+esc+suffix, got, r)
			}
		}
		if strings.ContainsAny(prefix+suffix, "\x1b\u009b"+c1StringOpeners) || len(prefix+suffix) > stderrTailBytes-64 {
			return // the sequence might join one already there, or be cut off
		}
		if want := lastLine(prefix + suffix); got != want {
			t.Fatalf("lastLine(%q) = %q, but without %q it is %q", prefix+esc+suffix, got, esc, want)
		}
	})
}
