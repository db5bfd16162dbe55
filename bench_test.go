package retryq_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/loadtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// The engine benchmarks of issue #3, on a SQLite file in WAL mode with
// synchronous=FULL and 50 concurrent no-op handlers. Run them with
//
//	go test -run '^$' -bench 'BenchmarkSQLite' -benchtime 1x .
//
// Each reports tasks/s and enqueue->handler-start latency percentiles
// (nearest rank over every task's first attempt, on the monotonic clock; see
// loadtest.Result); paced also reports the send rate it achieved and its
// worst lag behind schedule.

func openBenchSQLite(b *testing.B) store.Store {
	b.Helper()
	dir := b.TempDir()
	logFsync(b, dir)
	st, err := sqlite.Open(b.Context(), sqlite.Config{Path: filepath.Join(dir, "bench.db"), Synchronous: "FULL"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// RunWorkloads runs the standard workloads against stores made by open.
func runWorkloads(b *testing.B, open func(b *testing.B) store.Store) {
	o := loadtest.Options{Concurrency: 50}
	cases := []struct {
		name string
		run  func(st store.Store) (loadtest.Result, error)
	}{
		{"bulk", func(st store.Store) (loadtest.Result, error) { return loadtest.Bulk(st, 50_000, o) }},
		{"stream", func(st store.Store) (loadtest.Result, error) { return loadtest.Stream(st, 20_000, 8, o) }},
		{"paced", func(st store.Store) (loadtest.Result, error) { return loadtest.Paced(st, 2_000, 200, o) }},
		{"retry", func(st store.Store) (loadtest.Result, error) { return loadtest.Retry(st, 10_000, o) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				st := open(b)
				r, err := c.run(st)
				if err != nil {
					b.Fatal(err)
				}
				b.Log(r.String())
				b.ReportMetric(r.TasksPerSec(), "tasks/s")
				b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99_ms")
				if r.Pace.Target > 0 {
					// How closely the producer kept its schedule: a paced
					// figure is only the one asked for if this holds.
					b.ReportMetric(r.Pace.Rate, "sends/s")
					b.ReportMetric(float64(r.Pace.MaxLag.Microseconds())/1000, "max_lag_ms")
				}
			}
		})
	}
}

func BenchmarkSQLite(b *testing.B) { runWorkloads(b, openBenchSQLite) }

// logFsync logs the disk's durable-write latency in dir just before a run:
// the median of 100 4 KiB writes each followed by fdatasync, what one
// SQLite commit waits for at least. On a virtual disk it varies between
// runs, and the stream workload's throughput follows it.
func logFsync(b *testing.B, dir string) {
	b.Helper()
	f, err := os.CreateTemp(dir, "fsync-probe")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := make([]byte, 4096)
	ds := make([]time.Duration, 100)
	for i := range ds {
		t0 := time.Now()
		if _, err := f.WriteAt(page, int64(i%10)*4096); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	b.Logf("disk: 4 KiB write + fdatasync median %s (p90 %s)", ds[50].Round(time.Microsecond), ds[90].Round(time.Microsecond))
}

// scaleSizes reads RETRYQ_BENCH_SCALE (comma-separated waiting-task counts;
// default 10000,100000; add 1000000 for the full scale run).
func scaleSizes(b *testing.B) []int {
	spec := os.Getenv("RETRYQ_BENCH_SCALE")
	if spec == "" {
		spec = "10000,100000"
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("RETRYQ_BENCH_SCALE: bad size %q", f)
		}
		out = append(out, n)
	}
	return out
}

// runScale measures, with n tasks waiting in the delayed queue, the cost of
// one fetch, promotion and wake-up lookup, and a bulk run of 10,000 tasks
// beside them (throughput and peak heap).
func runScale(b *testing.B, open func(b *testing.B) store.Store) {
	for _, n := range scaleSizes(b) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				st := open(b)
				t0 := time.Now()
				if err := loadtest.FillWaiting(st, n); err != nil {
					b.Fatal(err)
				}
				fill := time.Since(t0)
				fetch, promote, wake, err := loadtest.ProbeCosts(st, 50)
				if err != nil {
					b.Fatal(err)
				}
				r, err := loadtest.Bulk(st, 10_000, loadtest.Options{Concurrency: 50})
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("%d waiting (filled in %s): fetch %s, promote %s, next-wakeup %s; %s", n, fill.Round(time.Millisecond), fetch, promote, wake, r)
				b.ReportMetric(float64(fetch.Microseconds()), "fetch_us")
				b.ReportMetric(float64(promote.Microseconds()), "promote_us")
				b.ReportMetric(r.TasksPerSec(), "tasks/s")
				b.ReportMetric(float64(r.PeakHeap>>20), "peak_heap_MiB")
			}
		})
	}
}

func BenchmarkSQLiteScale(b *testing.B) { runScale(b, openBenchSQLite) }
