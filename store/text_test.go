package store

import (
	"testing"
	"unicode/utf8"
)

func TestCleanText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain ascii", "plain ascii"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"cut in a rune: \xc3", "cut in a rune: \uFFFD"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"\xff\xfe\x00", "\uFFFD\uFFFD"}, // one run of invalid bytes, then the NUL
	} {
		got := CleanText(c.in)
		if got != c.want {
			t.Errorf("CleanText(%q) = %q, want %q", c.in, got, c.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("CleanText(%q) = %q is not valid UTF-8", c.in, got)
		}
	}
}

func TestCleanOutcomes(t *testing.T) {
	clean := []Outcome{
		{TaskID: "a", State: StateSucceeded, Detail: "HTTP 200: ok"},
		{TaskID: "b", State: StateDead, DeadReason: DeadNonRetryable, Error: &ErrorInfo{Code: "E", Message: "ünïcode", Class: "permanent"}},
	}
	if got := CleanOutcomes(clean); &got[0] != &clean[0] {
		t.Error("clean outcomes were copied")
	}
	odd := []Outcome{
		clean[0],
		{TaskID: "c", State: StateDead, DeadReason: DeadNonRetryable, Error: &ErrorInfo{Code: "E\x00", Message: "boom \xc3", Class: "permanent"}, Detail: "a\x00b"},
	}
	got := CleanOutcomes(odd)
	if &got[0] == &odd[0] {
		t.Fatal("odd outcomes were not copied")
	}
	if got[0] != odd[0] {
		t.Errorf("a clean outcome changed: %+v", got[0])
	}
	if e := got[1].Error; e.Code != "E\uFFFD" || e.Message != "boom \uFFFD" || got[1].Detail != "a\uFFFDb" || got[1].TaskID != "c" {
		t.Errorf("cleaned outcome = %+v, error %+v", got[1], *e)
	}
	if odd[1].Error.Message != "boom \xc3" || odd[1].Detail != "a\x00b" {
		t.Error("CleanOutcomes modified its input")
	}
}
