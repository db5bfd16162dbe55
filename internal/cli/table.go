package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// table prints rows as aligned columns separated by two spaces, with a
// header line. Numeric columns may be right-aligned. Cells are cleaned of
// control characters, so that data from the server cannot break the layout
// or send escape sequences to the terminal.
type table struct {
	header []string
	rows   [][]string
	right  []bool
}

func newTable(header ...string) *table {
	return &table{header: header, right: make([]bool, len(header))}
}

// alignRight right-aligns the given columns.
func (t *table) alignRight(cols ...int) *table {
	for _, c := range cols {
		if c >= 0 && c < len(t.right) {
			t.right[c] = true
		}
	}
	return t
}

// add appends a row; missing cells are empty, extra cells are dropped.
func (t *table) add(cells ...string) {
	row := make([]string, len(t.header))
	for i := range row {
		if i < len(cells) {
			row[i] = cleanCell(cells[i], 0)
		}
	}
	t.rows = append(t.rows, row)
}

// write prints the table.
func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = textWidth(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], textWidth(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		var l strings.Builder
		for i, c := range cells {
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-textWidth(c))
			switch {
			case t.right[i]:
				l.WriteString(pad + c)
			case i < len(cells)-1:
				l.WriteString(c + pad)
			default:
				l.WriteString(c)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(t.header)
	for _, r := range t.rows {
		line(r)
	}
	_, _ = io.WriteString(w, b.String())
}

// fieldList prints "label  value" lines with the values aligned, for one
// object (a task, a type).
type fieldList struct {
	labels, values []string
}

func (f *fieldList) add(label, value string) {
	f.labels = append(f.labels, label)
	f.values = append(f.values, value)
}

func (f *fieldList) write(w io.Writer) {
	width := 0
	for _, l := range f.labels {
		width = max(width, utf8.RuneCountInString(l))
	}
	var b strings.Builder
	for i, l := range f.labels {
		fmt.Fprintf(&b, "%-*s  %s\n", width, l, cleanCell(f.values[i], 0))
	}
	_, _ = io.WriteString(w, b.String())
}

// unprintable reports whether r must not reach a terminal as it is: a
// control character (newlines, tabs, escapes, C1 controls), a
// bidirectional formatting character (which reorders what follows it on
// screen) or utf8.RuneError (invalid UTF-8).
func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == utf8.RuneError
}

// The C1 controls that open a string sequence (DCS, SOS, OSC, PM, APC) and
// the one that ends it (ST), as UTF-8 text holds them.
const (
	c1StringOpeners    = "\u0090\u0098\u009d\u009e\u009f"
	c1StringTerminator = "\u009c"
)

// dropEscapes removes the terminal escape sequences from s: CSI sequences
// (colours, cursor moves: ESC [ or U+009B, parameters, a final byte), string
// sequences (window titles, hyperlinks: ESC ] P X ^ _ or their C1 forms
// U+009D U+0090 U+0098 U+009E U+009F, up to BEL, ESC \ or U+009C), nF
// escapes (ESC, bytes from '!' to '/', a final byte from '0' to '~':
// "ESC ( B") and two-byte escapes (ESC and one byte from '0' to '~').
// Other control characters are left to the caller.
func dropEscapes(s string) string {
	if !strings.ContainsAny(s, "\x1b\u009b"+c1StringOpeners) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\u009b' || r == '\x1b' && i+1 < len(s) && s[i+1] == '[':
			j := i + size
			if r == '\x1b' {
				j++
			}
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x3f { // parameters, intermediates
				j++
			}
			if j < len(s) && s[j] >= 0x40 && s[j] <= 0x7e { // the final byte
				j++
			}
			i = j
		case strings.ContainsRune(c1StringOpeners, r) || r == '\x1b' && i+1 < len(s) && strings.IndexByte("]PX^_", s[i+1]) >= 0:
			j := i + size
			if r == '\x1b' {
				j++
			}
			for j < len(s) && s[j] != '\a' && !(s[j] == '\x1b' && j+1 < len(s) && s[j+1] == '\\') &&
				!strings.HasPrefix(s[j:], c1StringTerminator) && s[j] != '\n' {
				j++
			}
			switch {
			case j < len(s) && s[j] == '\a':
				j++
			case j < len(s) && s[j] == '\x1b':
				j += 2
			case strings.HasPrefix(s[j:], c1StringTerminator):
				j += len(c1StringTerminator)
			}
			i = j
		case r == '\x1b' && i+1 < len(s) && s[i+1] >= 0x21 && s[i+1] <= 0x2f:
			// nF: intermediates, then a final byte ("ESC ( B", as tput sgr0
			// writes). A stray ESC before a space stays a space.
			j := i + 1
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
				j++
			}
			if j < len(s) && s[j] >= 0x30 && s[j] <= 0x7e {
				j++
			}
			i = j
		case r == '\x1b' && i+1 < len(s) && s[i+1] >= 0x30 && s[i+1] <= 0x7e:
			// Fp, Fe, Fs: "ESC 7" (save the cursor), "ESC M", "ESC c".
			i += 2
		default:
			b.WriteString(s[i : i+size])
			i += size
		}
	}
	return b.String()
}

// cleanCell drops terminal escape sequences, replaces the other
// unprintable characters (newlines, tabs, bidirectional overrides) with
// spaces and, when limit > 0, shortens s to limit runes with an ellipsis.
func cleanCell(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if unprintable(r) {
			return ' '
		}
		return r
	}, dropEscapes(s))
	if limit > 0 && utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		s = string(r[:limit-1]) + "…"
	}
	return s
}

// fitCell is cleanCell for the screen: it shortens s to at most cols
// terminal columns (textWidth), not runes, with an ellipsis.
func fitCell(s string, cols int) string {
	s = cleanCell(s, 0)
	if textWidth(s) <= cols {
		return s
	}
	var b strings.Builder
	w := 0
	for _, r := range s {
		rw := runeWidth(r)
		if w+rw > cols-1 {
			break
		}
		b.WriteRune(r)
		w += rw
	}
	return b.String() + "…"
}

// textWidth is the number of terminal columns s takes: wide characters
// (CJK, Hangul, emoji) take two, combining marks and zero-width
// characters none. Columns are aligned on it, not on the number of runes.
func textWidth(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

// runeWidth is the number of terminal columns r takes (0, 1 or 2).
func runeWidth(r rune) int {
	switch {
	case r < 0x300:
		return 1
	case unicode.In(r, unicode.Mn, unicode.Me, zeroWidthRunes):
		return 0
	case unicode.Is(wideRunes, r):
		return 2
	}
	return 1
}

// zeroWidthRunes are the characters besides combining marks that take no
// column: Hangul medial vowels and final consonants (which join the
// syllable before them), zero-width spaces and joiners, the byte order mark.
var zeroWidthRunes = &unicode.RangeTable{R16: []unicode.Range16{
	{Lo: 0x1160, Hi: 0x11ff, Stride: 1},
	{Lo: 0x200b, Hi: 0x200d, Stride: 1},
	{Lo: 0x2060, Hi: 0x2064, Stride: 1},
	{Lo: 0xfeff, Hi: 0xfeff, Stride: 1},
}}

// wideRunes are the characters terminals draw two columns wide: the East
// Asian wide and fullwidth ones (CJK ideographs, kana, Hangul syllables,
// fullwidth forms) and the emoji drawn as pictures by default.
var wideRunes = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x1100, Hi: 0x115f, Stride: 1}, {Lo: 0x231a, Hi: 0x231b, Stride: 1}, {Lo: 0x2329, Hi: 0x232a, Stride: 1},
		{Lo: 0x23e9, Hi: 0x23ec, Stride: 1}, {Lo: 0x23f0, Hi: 0x23f0, Stride: 1}, {Lo: 0x23f3, Hi: 0x23f3, Stride: 1},
		{Lo: 0x25fd, Hi: 0x25fe, Stride: 1}, {Lo: 0x2614, Hi: 0x2615, Stride: 1}, {Lo: 0x2648, Hi: 0x2653, Stride: 1},
		{Lo: 0x267f, Hi: 0x267f, Stride: 1}, {Lo: 0x2693, Hi: 0x2693, Stride: 1}, {Lo: 0x26a1, Hi: 0x26a1, Stride: 1},
		{Lo: 0x26aa, Hi: 0x26ab, Stride: 1}, {Lo: 0x26bd, Hi: 0x26be, Stride: 1}, {Lo: 0x26c4, Hi: 0x26c5, Stride: 1},
		{Lo: 0x26ce, Hi: 0x26ce, Stride: 1}, {Lo: 0x26d4, Hi: 0x26d4, Stride: 1}, {Lo: 0x26ea, Hi: 0x26ea, Stride: 1},
		{Lo: 0x26f2, Hi: 0x26f3, Stride: 1}, {Lo: 0x26f5, Hi: 0x26f5, Stride: 1}, {Lo: 0x26fa, Hi: 0x26fa, Stride: 1},
		{Lo: 0x26fd, Hi: 0x26fd, Stride: 1}, {Lo: 0x2705, Hi: 0x2705, Stride: 1}, {Lo: 0x270a, Hi: 0x270b, Stride: 1},
		{Lo: 0x2728, Hi: 0x2728, Stride: 1}, {Lo: 0x274c, Hi: 0x274c, Stride: 1}, {Lo: 0x274e, Hi: 0x274e, Stride: 1},
		{Lo: 0x2753, Hi: 0x2755, Stride: 1}, {Lo: 0x2757, Hi: 0x2757, Stride: 1}, {Lo: 0x2795, Hi: 0x2797, Stride: 1},
		{Lo: 0x27b0, Hi: 0x27b0, Stride: 1}, {Lo: 0x27bf, Hi: 0x27bf, Stride: 1}, {Lo: 0x2b1b, Hi: 0x2b1c, Stride: 1},
		{Lo: 0x2b50, Hi: 0x2b50, Stride: 1}, {Lo: 0x2b55, Hi: 0x2b55, Stride: 1}, {Lo: 0x2e80, Hi: 0x303e, Stride: 1},
		{Lo: 0x3041, Hi: 0x33ff, Stride: 1}, {Lo: 0x3400, Hi: 0x4dbf, Stride: 1}, {Lo: 0x4e00, Hi: 0x9fff, Stride: 1},
		{Lo: 0xa000, Hi: 0xa4cf, Stride: 1}, {Lo: 0xa960, Hi: 0xa97f, Stride: 1}, {Lo: 0xac00, Hi: 0xd7a3, Stride: 1},
		{Lo: 0xf900, Hi: 0xfaff, Stride: 1}, {Lo: 0xfe10, Hi: 0xfe19, Stride: 1}, {Lo: 0xfe30, Hi: 0xfe6f, Stride: 1},
		{Lo: 0xff00, Hi: 0xff60, Stride: 1}, {Lo: 0xffe0, Hi: 0xffe6, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x16fe0, Hi: 0x16fe4, Stride: 1}, {Lo: 0x17000, Hi: 0x18cff, Stride: 1}, {Lo: 0x1b000, Hi: 0x1b2ff, Stride: 1},
		{Lo: 0x1f004, Hi: 0x1f004, Stride: 1}, {Lo: 0x1f0cf, Hi: 0x1f0cf, Stride: 1}, {Lo: 0x1f18e, Hi: 0x1f18e, Stride: 1},
		{Lo: 0x1f191, Hi: 0x1f19a, Stride: 1}, {Lo: 0x1f200, Hi: 0x1f202, Stride: 1}, {Lo: 0x1f210, Hi: 0x1f23b, Stride: 1},
		{Lo: 0x1f240, Hi: 0x1f248, Stride: 1}, {Lo: 0x1f250, Hi: 0x1f251, Stride: 1}, {Lo: 0x1f260, Hi: 0x1f265, Stride: 1},
		{Lo: 0x1f300, Hi: 0x1f64f, Stride: 1}, {Lo: 0x1f680, Hi: 0x1f6ff, Stride: 1}, {Lo: 0x1f7e0, Hi: 0x1f7eb, Stride: 1},
		{Lo: 0x1f90c, Hi: 0x1f9ff, Stride: 1}, {Lo: 0x1fa70, Hi: 0x1faff, Stride: 1}, {Lo: 0x20000, Hi: 0x2fffd, Stride: 1},
		{Lo: 0x30000, Hi: 0x3fffd, Stride: 1},
	},
}

// orDash returns s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtTime formats a time in the local zone, to the second.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// fmtRelTime formats t relative to now: "in 30s", "5m ago", "now".
func fmtRelTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	switch {
	case d > 0 && d >= time.Second:
		return "in " + fmtAge(d)
	case d < 0 && -d >= time.Second:
		return fmtAge(-d) + " ago"
	default:
		return "now"
	}
}

// fmtAge formats a positive duration coarsely: 45s, 12m, 3h, 5d.
func fmtAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}

// fmtSeconds formats a duration given in seconds, to the millisecond
// under a minute: 250ms, 2.201s, 30s, 10m0s.
func fmtSeconds(s float64) string {
	if s == 0 {
		return "0s"
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		// Whole milliseconds over 1000: Duration.Seconds adds the
		// fraction to the whole seconds, which prints 2.619 s as
		// 2.6189999999999998.
		ms := d.Round(time.Millisecond).Milliseconds()
		return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// fmtPercent formats a ratio as a percentage with one decimal.
func fmtPercent(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 1, 64) + "%"
}
