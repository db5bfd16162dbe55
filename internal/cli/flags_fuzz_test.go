package cli

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExitCodesAllOrNothing(t *testing.T) {
	var codes []int
	v := exitCodesValue{codes: &codes}
	if err := v.Set("3, 4"); err != nil || len(codes) != 2 {
		t.Fatalf("Set(3, 4) = %v, codes %v", err, codes)
	}
	if err := v.Set("5,x,6"); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("Set(5,x,6) = %v", err)
	}
	if v.String() != "3,4" {
		t.Fatalf("after a refused list, codes %q, want 3,4", v.String())
	}
}

// FuzzParseDuration: every input is either refused with a message that
// quotes it, or read as Go duration syntax or as seconds, consistently.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30s", "1m30s", "0.5", "-1", "1e300", "NaN", "inf", "9223372036.854775807", "0x10", "1_0", " 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("parseDuration(%q): error %q does not quote the input", s, err)
			}
			return
		}
		if gd, gerr := time.ParseDuration(s); gerr == nil {
			if d != gd {
				t.Fatalf("parseDuration(%q) = %v, time.ParseDuration says %v", s, d, gd)
			}
			return
		}
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			t.Fatalf("parseDuration(%q) = %v, but it is neither a duration nor a number", s, d)
		}
		if want := f * float64(time.Second); math.Abs(float64(d)-want) > math.Max(1, math.Abs(want)*1e-15) {
			t.Fatalf("parseDuration(%q) = %d ns, want about %.0f", s, d, want)
		}
	})
}

// FuzzExitCodes: a list is taken whole, each code in 1..255, or refused
// whole.
func FuzzExitCodes(f *testing.F) {
	for _, s := range []string{"1", "3,4", " 7 , 8", "0", "256", "1,,2", "-1", "+5", "", "1,x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		codes := []int{9}
		err := exitCodesValue{codes: &codes}.Set(s)
		if err != nil {
			if len(codes) != 1 {
				t.Fatalf("Set(%q) refused (%v) but changed the codes to %v", s, err, codes)
			}
			return
		}
		if want := 1 + strings.Count(s, ",") + 1; len(codes) != want {
			t.Fatalf("Set(%q) = %v: %d codes, want %d", s, codes, len(codes), want)
		}
		for _, c := range codes[1:] {
			if c < 1 || c > 255 {
				t.Fatalf("Set(%q) took code %d", s, c)
			}
		}
	})
}
