package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/api"
)

// newFlagSet returns a flag set for command name whose help text is usage
// (the lines before the flag list) followed by the flags' defaults.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseFlags reports errors itself
	fs.Usage = func() {
		out := fs.Output()
		_, _ = io.WriteString(out, usage)
		_, _ = io.WriteString(out, "\nFlags:\n")
		printFlags(out, fs)
	}
	return fs
}

// printFlags lists fs's flags GNU style ("--name TYPE"), with defaults.
// A back-quoted word in a flag's usage names its argument, as in package
// flag.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if arg != "" {
			fmt.Fprintf(&b, " %s", arg)
		}
		fmt.Fprintf(&b, "\n        %s", usage)
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteByte('\n')
	})
	_, _ = io.WriteString(w, b.String())
}

// parseFlags parses args. On -h it prints the help to stdout and returns
// (exitOK, false); on a bad flag it prints the error and a hint to stderr
// and returns (exitUsage, false).
func parseFlags(env *Env, fs *flag.FlagSet, args []string) (status int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(env.Stdout)
		fs.Usage()
		return exitOK, false
	default:
		// The flag package names flags with one dash; the docs use two.
		msg := strings.NewReplacer("flag -", "flag --", ": -", ": --").Replace(err.Error())
		return usageError(env, fs.Name(), msg), false
	}
}

// usageError reports a usage problem of command name and returns exitUsage.
func usageError(env *Env, name, msg string) int {
	fmt.Fprintf(env.Stderr, "retryq %s: %s\nRun \"retryq %s -h\" for usage.\n", name, msg, name)
	return exitUsage
}

// durationValue is a flag taking a Go duration ("1m30s") or plain seconds
// ("0.5").
type durationValue struct{ d *time.Duration }

// String implements flag.Value.
func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

// Set implements flag.Value.
func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseDuration accepts Go duration syntax ("30s", "1m30s") and plain,
// possibly fractional, seconds ("0.5", "30").
func parseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a duration such as 30s, 1m30s or 0.5 (seconds), got %q", s)
	}
	ns := f * float64(time.Second)
	if ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, fmt.Errorf("duration %q is out of range", s)
	}
	d := time.Duration(math.Round(ns))
	if d == 0 && f != 0 {
		// 0 often means "none" (--timeout 0): a value that is not 0 must not become it.
		return 0, fmt.Errorf("duration %q is below a nanosecond", s)
	}
	return d, nil
}

// apiSecondsProblem returns what the API would refuse in d, a duration
// flag sent as one of its seconds fields (delay_seconds,
// older_than_seconds), as a usage message naming flag; "" if it would take
// it. A negative d is the caller's to refuse.
func apiSecondsProblem(flag string, d time.Duration) string {
	switch {
	case d > 0 && d < time.Microsecond:
		return fmt.Sprintf("%s: must be 0 or at least 1µs (got %v)", flag, d)
	case d > api.MaxDelay:
		return fmt.Sprintf("%s: must be at most %v (10 years; got %v)", flag, api.MaxDelay, d)
	}
	return ""
}

// decimalValue is an integer flag read in decimal only. The flag package's
// IntVar reads Go literals: "010" would be 8, "0x10" 16.
type decimalValue struct{ p *int }

// String implements flag.Value.
func (v decimalValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

// Set implements flag.Value.
func (v decimalValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want a decimal integer, got %q", s)
	}
	*v.p = n
	return nil
}

// intFlag defines a decimal integer flag with default def, as fs.IntVar.
func intFlag(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(decimalValue{p}, name, usage)
}

// exitCodesValue is a flag taking a comma-separated list of exit codes
// 1-255; it may be repeated.
type exitCodesValue struct{ codes *[]int }

// String implements flag.Value.
func (v exitCodesValue) String() string {
	if v.codes == nil {
		return ""
	}
	parts := make([]string, len(*v.codes))
	for i, c := range *v.codes {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value. A list with any bad code adds none.
func (v exitCodesValue) Set(s string) error {
	parts := strings.Split(s, ",")
	codes := make([]int, 0, len(parts))
	for _, part := range parts {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 255 {
			return fmt.Errorf("want exit codes from 1 to 255 separated by commas, got %q", part)
		}
		codes = append(codes, n)
	}
	*v.codes = append(*v.codes, codes...)
	return nil
}
