package loadtest

import (
	"errors"
	"testing"
	"time"
)

// TestPercentilesAreNearestRank pins the percentile rule the benchmarks
// report: the nearest rank, the smallest sample with at least p % of the
// samples at or below it (p50 of 1..100 ms is 50 ms, p99 is 99 ms).
func TestPercentilesAreNearestRank(t *testing.T) {
	tests := []struct {
		n        int
		p50, p99 time.Duration
	}{
		{n: 1, p50: 1 * time.Millisecond, p99: 1 * time.Millisecond},
		{n: 2, p50: 1 * time.Millisecond, p99: 2 * time.Millisecond},
		{n: 100, p50: 50 * time.Millisecond, p99: 99 * time.Millisecond},
		{n: 101, p50: 51 * time.Millisecond, p99: 100 * time.Millisecond},
		{n: 2000, p50: 1000 * time.Millisecond, p99: 1980 * time.Millisecond},
		{n: 20000, p50: 10000 * time.Millisecond, p99: 19800 * time.Millisecond},
	}
	for _, tt := range tests {
		// Samples i ms for i = n..1, recorded in reverse so the sort matters.
		h := &harness{}
		for i := tt.n; i >= 1; i-- {
			h.lat = append(h.lat, time.Duration(i)*time.Millisecond)
		}
		p50, p99 := h.percentiles()
		if p50 != tt.p50 || p99 != tt.p99 {
			t.Errorf("%d samples 1..%d ms: p50 %s, p99 %s; want %s, %s", tt.n, tt.n, p50, p99, tt.p50, tt.p99)
		}
	}
	if p50, p99 := (&harness{}).percentiles(); p50 != 0 || p99 != 0 {
		t.Errorf("no samples: p50 %s, p99 %s; want 0, 0", p50, p99)
	}
}

// TestCheckCallsCountsEachTask pins the retry workload's rule of exactly
// want handler calls per task: the right total is not enough when one task
// ran once too often and another once too rarely, and every first attempt
// must give one latency sample.
func TestCheckCallsCountsEachTask(t *testing.T) {
	tests := []struct {
		name    string
		calls   map[string]int
		samples int
		ok      bool
	}{
		{"exact", map[string]int{"a": 3, "b": 3}, 2, true},
		{"same total, uneven", map[string]int{"a": 4, "b": 2}, 2, false},
		{"a task never handled", map[string]int{"a": 3}, 1, false},
		{"a sample missing", map[string]int{"a": 3, "b": 3}, 1, false},
		{"a first attempt run twice", map[string]int{"a": 3, "b": 3}, 3, false},
	}
	for _, tt := range tests {
		err := checkCalls(tt.calls, tt.samples, 2, 3)
		if (err == nil) != tt.ok {
			t.Errorf("%s: checkCalls = %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrMeasurement) {
			t.Errorf("%s: error %v is not ErrMeasurement", tt.name, err)
		}
	}
}

// TestLatencyStampRoundTrip checks that a stamp read back at a later
// instant gives the time between the two.
func TestLatencyStampRoundTrip(t *testing.T) {
	at := time.Now()
	d, ok := latencyOf(stampAt(at), at.Add(1500*time.Microsecond))
	if !ok || d != 1500*time.Microsecond {
		t.Errorf("latencyOf = %s, %v; want 1.5ms, true", d, ok)
	}
	if _, ok := latencyOf([]byte(`{"x":1}`), at); ok {
		t.Error("a payload that is no stamp gave a latency")
	}
}
