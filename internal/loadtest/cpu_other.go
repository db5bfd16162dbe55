//go:build !unix

package loadtest

import "time"

// processCPU is not reported on this platform.
func processCPU() (user, system time.Duration) { return 0, 0 }
