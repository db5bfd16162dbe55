package loadtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// ErrMeasurement reports a run whose handler calls or latency samples do
// not match the workload, so its figures cannot be trusted.
var ErrMeasurement = errors.New("measurement does not match the workload")

// epoch is the instant payload stamps count from. Stamps are durations
// since it read on the process's monotonic clock (time.Time.Sub of two
// readings of time.Now), so a step of the wall clock during a run (NTP, a
// VM resuming) cannot add to or hide latency. Producer and handler run in
// one process, so they share the reference.
var epoch = time.Now()

// stampAt encodes instant t as a payload: nanoseconds since epoch.
func stampAt(t time.Time) json.RawMessage {
	return strconv.AppendInt(nil, int64(t.Sub(epoch)), 10)
}

// stamp encodes the current instant as a payload.
func stamp() json.RawMessage { return stampAt(time.Now()) }

// latencyOf returns the time from the instant stamped in payload to now.
func latencyOf(payload []byte, now time.Time) (time.Duration, bool) {
	ns, err := strconv.ParseInt(string(payload), 10, 64)
	if err != nil {
		return 0, false
	}
	return now.Sub(epoch) - time.Duration(ns), true
}

// nearestRank returns the p-th percentile (0 < p <= 100) of sorted samples
// by the nearest-rank rule: the smallest sample with at least p % of the
// samples at or below it, with no interpolation. It is zero without samples.
func nearestRank(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := (n*p + 99) / 100 // ceil(n*p/100)
	rank = max(1, min(n, rank))
	return sorted[rank-1]
}

// percentiles returns p50 and p99 of the recorded latencies (all first
// attempts of the run, none left out as warm-up).
func (h *harness) percentiles() (p50, p99 time.Duration) {
	h.mu.Lock()
	s := slices.Clone(h.lat)
	h.mu.Unlock()
	slices.Sort(s)
	return nearestRank(s, 50), nearestRank(s, 99)
}

// checkCalls checks that each of n tasks reached the handler exactly want
// times and that every first attempt gave one latency sample: a total of
// want×n calls could otherwise hide one task run twice too often beside
// another run too rarely.
func checkCalls(calls map[string]int, samples, n, want int) error {
	if len(calls) != n {
		return fmt.Errorf("check calls: %d tasks reached the handler, want %d: %w", len(calls), n, ErrMeasurement)
	}
	for id, c := range calls {
		if c != want {
			return fmt.Errorf("check calls: task %s reached the handler %d times, want exactly %d: %w", id, c, want, ErrMeasurement)
		}
	}
	if samples != n {
		return fmt.Errorf("check calls: %d latency samples for %d tasks, want one per first attempt: %w", samples, n, ErrMeasurement)
	}
	return nil
}
