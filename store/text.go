package store

import "strings"

// CleanText returns s as every backend can store it as text: valid UTF-8
// without NUL bytes. Invalid byte sequences (such as a character cut by a
// length limit) and NUL bytes each become U+FFFD; valid text comes back
// unchanged, without copying. PostgreSQL refuses either in a text column,
// which would fail a whole batch for one remote worker's odd message.
func CleanText(s string) string {
	if ValidText(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// CleanOutcome returns o with its text (the error's code, message and
// class, the detail and the dead reason) passed through CleanText. Backends
// store outcomes cleaned, so one outcome's text cannot fail its batch.
func CleanOutcome(o Outcome) Outcome {
	if o.Error != nil {
		e := ErrorInfo{Code: CleanText(o.Error.Code), Message: CleanText(o.Error.Message), Class: CleanText(o.Error.Class)}
		if e != *o.Error {
			o.Error = &e
		}
	}
	o.Detail, o.DeadReason = CleanText(o.Detail), CleanText(o.DeadReason)
	return o
}

// CleanOutcomes returns os with every outcome passed through CleanOutcome:
// os itself when all of it is clean already, else a cleaned copy (os is
// never modified).
func CleanOutcomes(os []Outcome) []Outcome {
	for i := range os {
		if c := CleanOutcome(os[i]); !sameText(&c, &os[i]) {
			out := make([]Outcome, len(os))
			copy(out, os[:i])
			out[i] = c
			for j := i + 1; j < len(os); j++ {
				out[j] = CleanOutcome(os[j])
			}
			return out
		}
	}
	return os
}

// sameText reports whether a, the cleaned copy of b, has b's text.
func sameText(a, b *Outcome) bool {
	return a.Error == b.Error && a.Detail == b.Detail && a.DeadReason == b.DeadReason
}
