package budget

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/retryq/retryq/internal/window"
)

// Budget is a service-level retry budget; see the package documentation.
// Create it with [New]; it is safe for concurrent use.
type Budget struct {
	cfg     Config
	perNano float64 // rate rule refill, tokens per nanosecond
	reserve float64 // ratio rule floor: MinRetriesPerSecond × Window

	mu sync.Mutex
	// The rate rule's bucket held tokens at last, the latest time a retry
	// was allowed; it fills from there (see rateTokens). Only allowed
	// retries change them, so asking while waiting does not move the time
	// at which a retry is allowed by a rounding of the steps.
	tokens  float64
	last    time.Time
	started bool // a retry was allowed (the zero Time is a valid time)
	// win holds the ratio rule's deposits (A) and withdrawals (B) in
	// Buckets+1 buckets of Window/Buckets: a deposit counts for the newest
	// Buckets of them, a withdrawal for all of them. A withdrawal thus
	// stays at least a whole Window, however late in its bucket it was
	// made; expiring with its bucket after Window, it could leave up to a
	// bucket early, and retries made at the end of one bucket and again a
	// bucket-width later could reach twice the floor within one Window.
	win window.Counter
}

// Stats is a view of a budget's state at some time.
type Stats struct {
	RateTokens    float64 // rate rule: retries available now (0 if the rule is off)
	FirstAttempts int64   // ratio rule: first attempts in the window
	Retries       int64   // ratio rule: retries in the window
	RatioBalance  float64 // ratio rule: retries available now (0 if the rule is off)
}

// New returns a full budget for cfg. An invalid cfg is an error naming
// the field.
func New(cfg Config) (*Budget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &Budget{
		cfg:     cfg,
		perNano: float64(cfg.RetriesPerMinute) / float64(time.Minute),
		reserve: cfg.MinRetriesPerSecond * cfg.Window.Seconds(),
		tokens:  float64(cfg.RetriesPerMinute),
		win:     window.NewWidth(cfg.Window/time.Duration(cfg.Buckets), cfg.Buckets+1),
	}, nil
}

// RecordAttempt records a first attempt (not a retry) at now; it deposits
// RetryRatio into the ratio rule.
func (b *Budget) RecordAttempt(now time.Time) {
	b.mu.Lock()
	b.win.Add(now, 1, 0)
	b.mu.Unlock()
}

// AllowRetry reports whether a retry may go ahead at now, and if so spends
// one retry from the budget. When it may not, next is the earliest time at
// which a retry would be allowed if nothing else happened meanwhile; next
// is the zero Time when only new first attempts can make room (a ratio rule
// whose floor is less than one retry per Window, or none).
func (b *Budget) AllowRetry(now time.Time) (ok bool, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rateOK := b.cfg.RetriesPerMinute == 0 || b.rateTokens(now) >= 1
	ratioOK := !b.cfg.ratioOn() || b.ratioBalance(now) >= 1
	if rateOK && ratioOK {
		if b.cfg.RetriesPerMinute > 0 {
			b.tokens = b.rateTokens(now) - 1
			if !b.started || now.After(b.last) {
				b.last = now
			}
			b.started = true
		}
		b.win.Add(now, 0, 1)
		return true, time.Time{}
	}
	next = now
	if !rateOK {
		next = b.rateNext()
	}
	if b.cfg.ratioOn() {
		next = b.ratioNext(now, next)
	}
	return false, next
}

// rateTokens returns the rate rule's tokens at now: those at the latest
// allowed retry plus those earned since, up to a minute's worth. After the
// clock stepped back, none are earned until that retry's time is passed
// again.
func (b *Budget) rateTokens(now time.Time) float64 {
	if !b.started || !now.After(b.last) {
		return b.tokens
	}
	return min(b.tokens+float64(now.Sub(b.last))*b.perNano, float64(b.cfg.RetriesPerMinute))
}

// rateNext returns the earliest time at which the rate rule has a whole
// token (for a started rule short of one). The estimate is corrected by a
// few nanoseconds so that it agrees exactly with the arithmetic of
// rateTokens.
func (b *Budget) rateNext() time.Time {
	wait := time.Duration(math.Ceil((1 - b.tokens) / b.perNano))
	has := func(d time.Duration) bool { return b.tokens+float64(d)*b.perNano >= 1 }
	for i := 0; i < 16 && !has(wait); i++ {
		wait++
	}
	for i := 0; i < 16 && wait > 1 && has(wait-1); i++ {
		wait--
	}
	return b.last.Add(wait)
}

// ratioSums returns the deposits' first attempts and the withdrawn
// retries that count at now (see Budget.win).
func (b *Budget) ratioSums(now time.Time) (firsts, retries int64) {
	oldest := b.win.Epoch(now) - int64(b.cfg.Buckets) // holds withdrawals only
	b.win.Each(now, func(_ time.Time, x window.Bucket) bool {
		if x.Epoch > oldest {
			firsts += x.A
		}
		retries += x.B
		return true
	})
	return firsts, retries
}

// ratioBalance is the ratio rule's balance at now.
func (b *Budget) ratioBalance(now time.Time) float64 {
	return b.balance(b.ratioSums(now))
}

// balance is the ratio rule's balance for the given counts. Balances are
// always computed from counts by this one expression, never by adding up
// changes, so that equal counts give exactly equal balances.
func (b *Budget) balance(firsts, retries int64) float64 {
	return b.reserve + b.cfg.RetryRatio*float64(firsts) - float64(retries)
}

// ratioNext returns the earliest time >= from at which the ratio balance is
// at least 1, assuming no new events: the balance only changes as deposits
// and withdrawals expire, a bucket's deposits one bucket-width before its
// withdrawals. It returns the zero Time if that never happens (no floor,
// and the deposits are not enough).
func (b *Budget) ratioNext(now, from time.Time) time.Time {
	type change struct {
		at              time.Time
		firsts, retries int64 // leaving the counts
	}
	var changes []change
	oldest, width := b.win.Epoch(now)-int64(b.cfg.Buckets), b.win.Width()
	b.win.Each(now, func(expires time.Time, x window.Bucket) bool {
		if x.Epoch > oldest && x.A != 0 {
			changes = append(changes, change{at: expires.Add(-width), firsts: x.A})
		}
		if x.B != 0 {
			changes = append(changes, change{at: expires, retries: x.B})
		}
		return true
	})
	sort.SliceStable(changes, func(i, j int) bool { return changes[i].at.Before(changes[j].at) })
	firsts, retries := b.ratioSums(now)
	start := now
	for i := 0; i < len(changes); {
		// The counts are firsts and retries during [start, changes[i].at).
		at := changes[i].at
		if b.balance(firsts, retries) >= 1 && from.Before(at) {
			return later(start, from)
		}
		for ; i < len(changes) && changes[i].at.Equal(at); i++ {
			firsts -= changes[i].firsts
			retries -= changes[i].retries
		}
		start = at
	}
	if b.reserve >= 1 { // once everything has expired, only the floor remains
		return later(start, from)
	}
	return time.Time{}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Stats returns the budget's state at now without spending anything.
func (b *Budget) Stats(now time.Time) Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s Stats
	if b.cfg.RetriesPerMinute > 0 {
		s.RateTokens = b.rateTokens(now)
	}
	if b.cfg.ratioOn() {
		s.FirstAttempts, s.Retries = b.ratioSums(now)
		s.RatioBalance = b.ratioBalance(now)
	}
	return s
}
