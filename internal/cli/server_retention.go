package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
)

// minDeadRetention is the shortest --dead-retention the server takes
// without --allow-short-dead-retention. The dead-letter queue keeps what
// could not succeed so that someone can look at it and redrive it; a
// retention shorter than that empties it before anyone can.
const minDeadRetention = time.Hour

// errRetentionNoUnit refuses a retention given as a plain number. Plain
// numbers are seconds elsewhere in the CLI (and were here), so
// "--dead-retention 30", meant as 30 days, emptied the dead-letter queue
// every 30 seconds.
var errRetentionNoUnit = errors.New("needs a unit")

// retentionValue is a retention flag: a duration with a unit ("30d",
// "1d12h", "720h", "90m"), "forever" (or any negative duration) to keep
// the class forever, or 0 for the default.
type retentionValue struct {
	d *time.Duration
}

// String implements flag.Value.
func (v retentionValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return engine.RetentionText(*v.d)
}

// Set implements flag.Value.
func (v retentionValue) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// plainNumberRE matches a number without a unit.
var plainNumberRE = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)$`)

// daysRE matches a duration starting with days: "30d", "1.5d", "1d12h".
var daysRE = regexp.MustCompile(`^([+-]?)(\d+\.?\d*|\.\d+)d(.*)$`)

// parseRetention parses a retention flag's value (see retentionValue). A
// negative duration is returned as -1 (forever); 0 (with or without a
// unit) as 0 (the default). Any other number must carry a unit.
func parseRetention(s string) (time.Duration, error) {
	const want = "want a duration with a unit such as 30d, 12h or 90m, forever, or 0 for the default"
	switch {
	case strings.EqualFold(s, "forever"):
		return -1, nil
	case plainNumberRE.MatchString(s):
		f, _ := strconv.ParseFloat(s, 64)
		switch {
		case f == 0:
			return 0, nil
		case f < 0:
			return -1, nil
		}
		return 0, fmt.Errorf("%q %w (a plain number would be seconds): write %sd for days, %sh for hours or %ss for seconds",
			s, errRetentionNoUnit, s, s, s)
	}
	var d time.Duration
	if m := daysRE.FindStringSubmatch(s); m != nil {
		days, err := strconv.ParseFloat(m[2], 64)
		ns := days * float64(24*time.Hour)
		if err != nil || ns >= math.MaxInt64 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		d = time.Duration(math.Round(ns))
		if m[3] != "" {
			rest, err := time.ParseDuration(m[3])
			if err != nil || rest < 0 || strings.HasPrefix(m[3], "+") {
				return 0, fmt.Errorf("%s, got %q", want, s)
			}
			if rest > math.MaxInt64-d {
				return 0, fmt.Errorf("%q is out of range", s)
			}
			d += rest
		}
		if m[1] == "-" {
			d = -d
		}
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%s, got %q", want, s)
		}
	}
	if d < 0 {
		return -1, nil
	}
	if d == 0 && !isZeroText(s) {
		return 0, fmt.Errorf("%q is below a nanosecond", s) // not to become "the default"
	}
	return d, nil
}

// isZeroText reports whether a duration's text has no digit but 0.
func isZeroText(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r >= '1' && r <= '9' }) < 0
}

// retentionOptions are the server's retention flags.
type retentionOptions struct {
	succeeded, cancelled, dead time.Duration
	nodes                      time.Duration
	allowShort                 bool
}

// register adds the retention flags to fs.
func (r *retentionOptions) register(fs *flag.FlagSet) {
	fs.Var(retentionValue{d: &r.succeeded}, "succeeded-retention",
		"delete succeeded tasks this long after they finished (`duration`; default 1d)")
	fs.Var(retentionValue{d: &r.cancelled}, "cancelled-retention",
		"delete cancelled tasks this long after they were cancelled (`duration`; default: as --succeeded-retention)")
	fs.Var(retentionValue{d: &r.dead}, "dead-retention",
		"delete dead tasks this long after they died (`duration`; default 30d); at least 1h unless --allow-short-dead-retention")
	fs.BoolVar(&r.allowShort, "allow-short-dead-retention", false, "take a --dead-retention under 1h")
	fs.Var(retentionValue{d: &r.nodes}, "node-retention",
		"delete a node's registry row this long after it was last seen (`duration`; default 7d); at least 1m")
}

// check refuses a dead-letter retention under minDeadRetention unless
// allowed and a node retention under engine.MinNodeRetention, and fills in
// the cancelled retention from the succeeded one when it is not given or
// given as 0.
func (r *retentionOptions) check() error {
	if r.dead > 0 && r.dead < minDeadRetention && !r.allowShort {
		return fmt.Errorf("--dead-retention: %v would delete dead tasks %v after they died, before anyone can look at "+
			"the dead-letter queue; give at least %v (30d is 30 days) or add --allow-short-dead-retention",
			r.dead, r.dead, fmtHours(minDeadRetention))
	}
	if r.nodes > 0 && r.nodes < engine.MinNodeRetention {
		return fmt.Errorf("--node-retention: %v would delete the registry rows of live nodes (each writes its row every 5 s); "+
			"give at least %v, or forever", r.nodes, engine.MinNodeRetention)
	}
	if r.cancelled == 0 {
		// Not given, or 0: the default, which is the succeeded retention.
		r.cancelled = r.succeeded
	}
	return nil
}
