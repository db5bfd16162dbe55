//go:build !linux

package sqlite

import "testing"

// mountSmallTmpfs skips the test: filling a small file system needs a
// Linux tmpfs mount.
func mountSmallTmpfs(t *testing.T, size int) string {
	t.Helper()
	t.Skip("filling a small tmpfs needs Linux")
	return ""
}
