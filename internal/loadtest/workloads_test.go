package loadtest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retryq/retryq/store/sqlite"
)

// TestSmallWorkloadsMeasureEveryTaskOnSQLite runs small bulk, stream, retry
// and paced workloads on a real SQLite file: every task is counted exactly
// 3 (retry) or 1 (the others) handler calls, every task gives one latency
// sample, and the paced run reports its pacing.
func TestSmallWorkloadsMeasureEveryTaskOnSQLite(t *testing.T) {
	open := func(t *testing.T) *sqlite.Store {
		st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "lt.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	o := Options{Concurrency: 8}
	for name, run := range map[string]func() (Result, error){
		"bulk":   func() (Result, error) { return Bulk(open(t), 200, o) },
		"stream": func() (Result, error) { return Stream(open(t), 200, 8, o) },
	} {
		r, err := run()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Attempts != 200 || r.Samples != 200 || r.Pace.Target != 0 {
			t.Errorf("%s: %d attempts, %d samples, pace %+v; want 200, 200, none", name, r.Attempts, r.Samples, r.Pace)
		}
	}
	r, err := Retry(open(t), 100, o)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if r.Attempts != 300 || r.Samples != 100 {
		t.Errorf("retry: %d attempts, %d samples; want 300, 100", r.Attempts, r.Samples)
	}
	r, err = Paced(open(t), 40, 200, o)
	if err != nil {
		t.Fatalf("paced: %v", err)
	}
	if r.Samples != 40 || r.Pace.Target != 200 || r.Pace.Rate <= 0 {
		t.Errorf("paced: %d samples, pace %+v; want 40 samples at a target of 200/s", r.Samples, r.Pace)
	}
	if r.P50 <= 0 || r.P99 < r.P50 || r.P99 > time.Minute {
		t.Errorf("paced: p50 %s, p99 %s", r.P50, r.P99)
	}
	t.Log(r)
}
