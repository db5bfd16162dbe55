//go:build linux

package retryq_test

import (
	"os"
	"syscall"
)

// datasync flushes f's data to the disk as a database commit does
// (fdatasync).
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
