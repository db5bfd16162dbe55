package cli

import (
	"strings"
	"testing"
)

// TestWriteStatsSaysWhenTypesAreLeftOut: when the server lists fewer types
// than it counted (GET /v1/stats lists at most 100), stats says so and
// still prints the TOTAL row, which covers them all, even beside a single
// listed type.
func TestWriteStatsSaysWhenTypesAreLeftOut(t *testing.T) {
	s := apiStatsAnswer{WindowSeconds: 3600, TypeCount: 250,
		Overall: apiStats{Total: 900, Counts: map[string]int{"pending": 900}},
		Types:   []apiStats{{Type: "big", Total: 400, Counts: map[string]int{"pending": 400}}}}
	var b strings.Builder
	writeStats(&b, &s)
	wantOutput(t, "stats with types left out", b.String(), "big", "TOTAL", "900", "1 of 250 types shown, those with the most tasks; TOTAL counts them all.")
}
