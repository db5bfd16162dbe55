package retry

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// The JSON form writes durations as decimal seconds. Going through float64
// would lose nanoseconds for durations longer than about 104 days, so the
// conversion is done on the decimal text: formatSeconds writes the exact
// value and parseSeconds reads it back exactly, which makes the JSON form
// round-trip to the identical Policy.

var (
	errSecondsSyntax   = errors.New("not a number")
	errSecondsOverflow = errors.New("out of range")
)

// formatSeconds writes d as exact decimal seconds: "1", "0.2", "-1.5",
// "0.000000001".
func formatSeconds(d time.Duration) string {
	var b strings.Builder
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = -u // two's complement magnitude; exact even for math.MinInt64
	}
	b.WriteString(strconv.FormatUint(u/1e9, 10))
	if frac := u % 1e9; frac != 0 {
		s := strconv.FormatUint(frac+1e9, 10)[1:] // 9 digits, zero padded
		b.WriteByte('.')
		b.WriteString(strings.TrimRight(s, "0"))
	}
	return b.String()
}

// parseSeconds reads a JSON number of seconds, such as "1", "0.2", "-3",
// "1.5e2", and returns it as a Duration rounded half away from zero to the
// nearest nanosecond. Values beyond the range of Duration fail with
// errSecondsOverflow.
func parseSeconds(s string) (time.Duration, error) {
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	mant, exp, ok := splitNumber(s)
	if !ok {
		return 0, errSecondsSyntax
	}
	// Collect significant digits and the position of the decimal point
	// relative to them.
	intPart, fracPart, _ := strings.Cut(mant, ".")
	digits := intPart + fracPart
	point := int64(len(intPart))
	trimmed := strings.TrimLeft(digits, "0")
	point -= int64(len(digits) - len(trimmed))
	digits = strings.TrimRight(trimmed, "0")
	if digits == "" {
		return 0, nil
	}
	// value = 0.digits × 10^point seconds; in nanoseconds the point moves
	// nine places right. exp is saturated, so this cannot overflow.
	q := point + exp + 9
	if q > 19 {
		return 0, errSecondsOverflow // at least 10^19 ns
	}
	if q < 0 {
		return 0, nil // below 0.1 ns
	}
	var n uint64
	for i := int64(0); i < q; i++ {
		n *= 10
		if i < int64(len(digits)) {
			n += uint64(digits[i] - '0')
		}
	}
	if q < int64(len(digits)) && digits[q] >= '5' {
		n++
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	if n > limit {
		return 0, errSecondsOverflow
	}
	if neg {
		return time.Duration(-n), nil
	}
	return time.Duration(n), nil
}

// splitNumber checks the JSON number grammar (without the sign) and returns
// the mantissa and the saturated decimal exponent.
func splitNumber(s string) (mant string, exp int64, ok bool) {
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, fracPart, hasPoint := strings.Cut(mant, ".")
	if !allDigits(intPart) || (hasPoint && !allDigits(fracPart)) {
		return "", 0, false
	}
	if len(intPart) > 1 && intPart[0] == '0' {
		return "", 0, false
	}
	if !hasExp {
		return mant, 0, true
	}
	sign := int64(1)
	switch {
	case strings.HasPrefix(expText, "+"):
		expText = expText[1:]
	case strings.HasPrefix(expText, "-"):
		sign, expText = -1, expText[1:]
	}
	if !allDigits(expText) {
		return "", 0, false
	}
	for _, c := range expText {
		if exp < 1e12 { // saturate: far beyond any digit count we accept
			exp = exp*10 + int64(c-'0')
		}
	}
	return mant, sign * exp, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
