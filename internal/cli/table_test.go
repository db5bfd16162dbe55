package cli

import (
	"os/exec"
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
		"längere   1234  line break\n" +
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
		{fmtSeconds(2.201197618), "2.201s"}, // a jittered delay: milliseconds, as under a second
		{fmtSeconds(600), "10m0s"},
		// An attempt's time from its timestamps: 2s + 0.619s in floating
		// point is 2.6189999999999998.
		{fmtSeconds((2619 * time.Millisecond).Seconds()), "2.619s"},
		{fmtSeconds(12.97), "12.97s"},
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

// TestShellQuoteUnprintable: a string with characters a terminal must not
// receive raw is quoted without them (as $'...' with \xHH escapes), and
// bash reads the quoted form back as the original bytes.
func TestShellQuoteUnprintable(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	for _, s := range []string{
		"E\x1b]0;owned\x07\x1b[2J\r\nrm -rf ~", "it's \\ a\ttab", "bidi \u202eevil", "bad \xff utf-8", "é\x1bé",
	} {
		q := shellQuote(s)
		if i := strings.IndexFunc(q, unprintable); i >= 0 {
			t.Errorf("shellQuote(%q) = %q: holds an unprintable character", s, q)
			continue
		}
		out, err := exec.Command(bash, "-c", "printf %s "+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) = %q: bash reads it back as %q (%v)", s, q, out, err)
		}
	}
}

// TestTailBufferLastLineWithoutEscapeSequences: the message of a failed
// command is its last line on stderr as it would read on a terminal.
// Colour codes are dropped rather than left as "[31m", a line that only
// resets the colour does not hide the error above it, and of a line that
// redrew itself with carriage returns (a progress bar) only its last
// version counts.
func TestTailBufferLastLineWithoutEscapeSequences(t *testing.T) {
	for _, tt := range []struct{ stderr, want string }{
		{"\x1b[1;31merror:\x1b[0m disk full\n\x1b[0m\n", "error: disk full"},
		{"fetching 10%\rfetching 55%\rerror: connection reset\r\n", "error: connection reset"},
		{"\x1b]0;title\x07upstream said 503\x1b[K\n", "upstream said 503"},
		{"bad \x1b input\n", "bad   input"},
	} {
		tb := &tailBuffer{max: 4096}
		tb.Write([]byte(tt.stderr))
		if got := tb.lastLine(); got != tt.want {
			t.Errorf("lastLine of %q = %q, want %q", tt.stderr, got, tt.want)
		}
	}
	if got := cleanCell("\x1b[31mred\x1b[0m and \u009b31mC1\u009bm", 0); got != "red and C1" {
		t.Errorf("cleanCell with colour codes = %q", got)
	}
}

// TestDropEscapesEndsC1StringsAtC1Terminator: a string sequence opened by a
// C1 control (OSC U+009D, DCS U+0090, SOS U+0098, PM U+009E, APC U+009F)
// ends at the C1 string terminator U+009C as at ESC \ or BEL. The text after
// it used to be dropped with the sequence (an OSC ran to the end of the
// line), and a C1 DCS's body was shown as text.
func TestDropEscapesEndsC1StringsAtC1Terminator(t *testing.T) {
	for in, want := range map[string]string{
		"disk \u009d0;title\u009cfull":         "disk full",
		"disk \u009d0;title\x1b\\full":         "disk full",
		"disk \u0090q#0;2\u009cfull":           "disk full",
		"disk \u0098sos\u009cfull":             "disk full",
		"disk \u009epm\u009cfull":              "disk full",
		"disk \u009fGf=100\u009cfull":          "disk full",
		"disk \x1b]8;;http://x/\u009cfull":     "disk full",
		"disk \u009d0;title\afull":             "disk full",
		"disk \u009d0;title, never ended full": "disk ",
	} {
		if got := dropEscapes(in); got != want {
			t.Errorf("dropEscapes(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTableAlignsWideCharactersByColumns: columns are aligned on the
// terminal columns a cell takes, not on its number of runes: CJK and emoji
// take two, combining accents none. A task type in Japanese pushed the
// rest of its row 5 columns right of the header, and one spelled with a
// combining accent pulled it left; the cells shortened to fit (fitCell)
// were cut at a number of runes, and a CJK message took twice the columns.
func TestTableAlignsWideCharactersByColumns(t *testing.T) {
	tb := newTable("TYPE", "STATE", "ERROR")
	tb.add("メール.送信", "dead", "🔥 down")
	tb.add("re\u0301sume\u0301", "pending", "-")
	tb.add("a", "running", "-")
	var b strings.Builder
	tb.write(&b)
	want := "" +
		"TYPE         STATE    ERROR\n" +
		"メール.送信  dead     🔥 down\n" +
		"re\u0301sume\u0301       pending  -\n" +
		"a            running  -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, c := range []struct {
		in    string
		limit int
		want  string
	}{
		{"日本語のテキスト", 7, "日本語…"},
		{"日本語のテキスト", 8, "日本語…"},
		{"日本語", 6, "日本語"},
		{"cafe\u0301 au lait", 5, "cafe\u0301…"},
	} {
		if got := fitCell(c.in, c.limit); got != c.want || textWidth(got) > c.limit {
			t.Errorf("fitCell(%q, %d) = %q (%d columns), want %q", c.in, c.limit, got, textWidth(got), c.want)
		}
	}
}
