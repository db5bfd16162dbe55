// Package leakcheck helps tests that cycle something many times (a store
// opened and closed, a client started and stopped, a server restarted)
// check that the process holds no more goroutines and file descriptors
// afterwards than before.
//
// Take a Baseline after one warm-up cycle (lazily started helpers, such
// as a shared test cluster's or a driver's, then count in it), run the
// cycles, and call Settled: it polls until the goroutines of every kind
// and the descriptors are back to the baseline or a deadline passes, and
// then fails naming the leak (the goroutines' stacks, the descriptors'
// targets).
//
// What is counted is the whole process's: a test that takes a Baseline
// refuses to run beside other tests (Take fails a parallel test, and a
// test that took one cannot become parallel), and the caller makes sure
// that what it cycles is in the same state at the baseline and at the
// end (a loop it waits for has started, not only been asked to).
package leakcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// Baseline is the process's goroutines and open file descriptors at one
// moment.
type Baseline struct {
	kinds map[string]int  // goroutines by kind (kindOf)
	ids   map[uint64]bool // the goroutines' ids
	fds   []string        // the descriptors' targets; nil where unknown
}

// exclusiveEnv is set for the test that takes a Baseline, for as long as
// it runs: testing then refuses to let the test, or one that called
// t.Parallel, run beside others.
const exclusiveEnv = "RETRYQ_LEAKCHECK"

// Take records the process's goroutines and open descriptors now. It
// fails t when t or one of its parents runs in parallel with other tests,
// whose goroutines and descriptors would count, and keeps t from calling
// t.Parallel afterwards.
func Take(t testing.TB) Baseline {
	t.Helper()
	exclusive(t)
	gs := snapshot()
	ids := make(map[uint64]bool, len(gs))
	for _, g := range gs {
		ids[g.id] = true
	}
	return Baseline{kinds: countKinds(gs), ids: ids, fds: openFDs()}
}

// exclusive fails t when it is parallel, and makes t.Parallel panic
// later, through t.Setenv, which refuses parallel tests.
func exclusive(t testing.TB) {
	t.Helper()
	refused := func() (r any) {
		defer func() { r = recover() }()
		t.Setenv(exclusiveEnv, t.Name())
		return nil
	}()
	if refused != nil {
		t.Fatalf("leakcheck: %s runs in parallel with other tests, whose goroutines and descriptors would count as its own (%v)", t.Name(), refused)
	}
}

// Settled waits up to within for the process to hold no more goroutines
// of any kind and no more descriptors than at b, and fails t otherwise
// with the stacks of the kinds that grew and the descriptors added since
// b. what names the cycles run.
func (b Baseline) Settled(t testing.TB, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		gs, fds := snapshot(), openFDs()
		grown, extra := b.grown(gs), added(b.fds, fds)
		if len(grown) == 0 && len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d goroutines (%d before), %d kinds of goroutine more than before, %d descriptors more than before %v\n%s",
				what, len(gs), len(b.ids), len(grown), len(extra), extra, b.describe(gs, grown))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grown returns the kinds of which gs holds more goroutines than b, with
// how many more.
func (b Baseline) grown(gs []goroutine) map[string]int {
	out := make(map[string]int)
	for k, n := range countKinds(gs) {
		if n > b.kinds[k] {
			out[k] = n - b.kinds[k]
		}
	}
	return out
}

// describe lists the kinds that grew with the stacks of their goroutines
// made since b (at most 3 of each).
func (b Baseline) describe(gs []goroutine, grown map[string]int) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(grown)) {
		fmt.Fprintf(&sb, "%d more goroutines started in %s (%d before):\n", grown[k], k, b.kinds[k])
		shown := 0
		for _, g := range gs {
			if g.kind != k || b.ids[g.id] || shown == 3 {
				continue
			}
			fmt.Fprintf(&sb, "%s\n\n", g.stack)
			shown++
		}
	}
	return sb.String()
}

// added returns the descriptors of now not in before, by kind: a file by
// its path, a socket or a pipe as one of its kind (a connection replaced
// by another is no leak; one more is).
func added(before, now []string) []string {
	if before == nil || now == nil {
		return nil
	}
	rest := make([]string, len(before))
	for i, f := range before {
		rest[i] = kind(f)
	}
	var out []string
	for _, f := range now {
		if i := slices.Index(rest, kind(f)); i >= 0 {
			rest = slices.Delete(rest, i, i+1)
			continue
		}
		out = append(out, f)
	}
	return out
}

// kind is a descriptor's target without the inode of a socket or pipe
// ("socket:[123]" is "socket:").
func kind(target string) string {
	if i := strings.Index(target, ":["); i > 0 && strings.HasSuffix(target, "]") {
		return target[:i+1]
	}
	return target
}

// FDsKnown reports whether this platform lets Baseline count descriptors.
func FDsKnown() bool { return openFDs() != nil }

// String describes b, for a test's log.
func (b Baseline) String() string {
	return fmt.Sprintf("%d goroutines, %d descriptors", len(b.ids), len(b.fds))
}
