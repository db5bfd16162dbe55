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
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		var l strings.Builder
		for i, c := range cells {
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
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

// fmtSeconds formats a duration given in seconds: 0.25s, 30s, 10m0s.
func fmtSeconds(s float64) string {
	if s == 0 {
		return "0s"
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// fmtPercent formats a ratio as a percentage with one decimal.
func fmtPercent(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 1, 64) + "%"
}
