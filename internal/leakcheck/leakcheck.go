// Package leakcheck helps tests that cycle something many times (a store
// opened and closed, a client started and stopped, a server restarted)
// check that the process holds no more goroutines and file descriptors
// afterwards than before.
//
// Take a Baseline after one warm-up cycle (lazily started helpers, such
// as a shared test cluster's or a driver's, then count in it), run the
// cycles, and call Settled: it polls until the counts are back to the
// baseline or a deadline passes, and then fails naming the leak (the
// goroutines' stacks, the descriptors' targets).
package leakcheck

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"
)

// Baseline is the process's goroutines and open file descriptors at one
// moment.
type Baseline struct {
	goroutines int
	fds        []string // the descriptors' targets; nil where unknown
}

// Take records the process's goroutine count and open descriptors now.
func Take(t testing.TB) Baseline {
	t.Helper()
	return Baseline{goroutines: runtime.NumGoroutine(), fds: openFDs()}
}

// Settled waits up to within for the process to hold no more goroutines
// and descriptors than at b, and fails t otherwise with the goroutines'
// stacks and the descriptors added since b. what names the cycles run.
func (b Baseline) Settled(t testing.TB, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		g, fds := runtime.NumGoroutine(), openFDs()
		extra := added(b.fds, fds)
		if g <= b.goroutines && len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Fatalf("after %s: %d goroutines (%d before), %d descriptors more than before %v\n%s",
				what, g, b.goroutines, len(extra), extra, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	return fmt.Sprintf("%d goroutines, %d descriptors", b.goroutines, len(b.fds))
}
