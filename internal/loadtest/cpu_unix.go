//go:build unix

package loadtest

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time this process used.
func processCPU() (user, system time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
