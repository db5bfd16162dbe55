//go:build linux

package sqlite

import (
	"fmt"
	"syscall"
	"testing"
)

// mountSmallTmpfs mounts a tmpfs of size bytes on a new directory and
// unmounts it in cleanup. It skips the test when this process may not
// mount (not root, or no CAP_SYS_ADMIN in its namespace).
func mountSmallTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
