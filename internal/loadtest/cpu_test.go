package loadtest

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	tests := []struct {
		line        string
		busy, total uint64
		ok          bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 5 50 800 20 3 2 0 7 1", 160, 980, true},
		{"cpu  100 5 50 800 20", 155, 975, true},
		{"cpu  1 2 3", 0, 0, false},
		{"cpu0 100 5 50 800 20 3 2 0 0 0", 0, 0, false},
		{"cpu  100 x 50 800 20", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		busy, total, ok := parseCPULine(tt.line)
		if busy != tt.busy || total != tt.total || ok != tt.ok {
			t.Errorf("parseCPULine(%q) = %d, %d, %v; want %d, %d, %v", tt.line, busy, total, ok, tt.busy, tt.total, tt.ok)
		}
	}
}

func TestCPUUseCountsWork(t *testing.T) {
	s := takeCPUSample()
	// The bound is on wall time only for a counter that never moves: a
	// process starved by a loaded machine (a CI runner's other packages)
	// may get well under 100 ms of CPU in seconds, and must not fail.
	deadline := time.Now().Add(time.Minute)
	x := uint64(1)
	// Spin until the process has used at least 100 ms of CPU.
	used := func() time.Duration { u, sys := processCPU(); return u + sys - s.user - s.system }
	for used() < 100*time.Millisecond && time.Now().Before(deadline) {
		for i := 0; i < 1_000_000; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	u := s.since()
	if runtime.GOOS != "windows" && u.Process < 100*time.Millisecond {
		t.Fatalf("process CPU %s after spinning, want at least 100ms (x=%d)", u.Process, x)
	}
	if runtime.GOOS == "linux" && (u.Machine <= 0 || u.Machine > 1) {
		t.Fatalf("machine share %.3f, want in (0, 1]", u.Machine)
	}
	out := u.format(10)
	if u.Process != u.User+u.System {
		t.Fatalf("process %s is not user %s + system %s", u.Process, u.User, u.System)
	}
	if !strings.HasPrefix(out, "process ") || !strings.Contains(out, "/task)") || !strings.Contains(out, "user ") {
		t.Fatalf("format = %q", out)
	}
}
