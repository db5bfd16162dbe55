package loadtest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUUse is the CPU a run used: the Go process's own (user plus system
// time, zero where the platform does not report it) and the whole
// machine's, as a share of all its CPUs' time (negative when unknown).
// On a machine that runs the database too, a stream run whose machine
// share stays low was waiting (on commits and wake-ups), not computing.
type CPUUse struct {
	Process      time.Duration // User + System
	User, System time.Duration
	Machine      float64 // 0..1 of all CPUs' time, or -1
}

// cpuSample is a point-in-time reading of both counters.
type cpuSample struct {
	user, system     time.Duration
	busy, total      uint64 // clock ticks from /proc/stat, all CPUs
	machineAvailable bool
}

func takeCPUSample() cpuSample {
	var s cpuSample
	s.user, s.system = processCPU()
	s.busy, s.total, s.machineAvailable = machineTicks()
	return s
}

// since returns the CPU used between s and now.
func (s cpuSample) since() CPUUse {
	now := takeCPUSample()
	u := CPUUse{User: now.user - s.user, System: now.system - s.system, Machine: -1}
	u.Process = u.User + u.System
	if s.machineAvailable && now.machineAvailable && now.total > s.total {
		u.Machine = float64(now.busy-s.busy) / float64(now.total-s.total)
	}
	return u
}

// format reads like "process 1.24s (user 0.8s, system 0.44s; 62µs/task),
// machine 71% busy".
func (u CPUUse) format(tasks int) string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	out := fmt.Sprintf("process %s (user %s, system %s", r(u.Process), r(u.User), r(u.System))
	if tasks > 0 {
		out += fmt.Sprintf("; %s/task", (u.Process / time.Duration(tasks)).Round(100*time.Nanosecond))
	}
	out += ")"
	if u.Machine >= 0 {
		out += fmt.Sprintf(", machine %.0f%% busy", 100*u.Machine)
	}
	return out
}

// machineTicks reads the first line of /proc/stat (Linux): busy and total
// ticks over all CPUs. ok is false where there is no such file.
func machineTicks() (busy, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, false
	}
	return parseCPULine(sc.Text())
}

// parseCPULine parses the aggregate "cpu" line of /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal, then guest and guest_nice,
// which user and nice already include. Busy is everything but idle and
// iowait.
func parseCPULine(line string) (busy, total uint64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 {
			break
		}
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total, true
}
