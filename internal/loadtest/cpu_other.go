//go:build !unix

package loadtest

import "time"

// processCPU is not reported on this platform.
func processCPU() time.Duration { return 0 }
