//go:build linux

package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// spaceSlack is the most SQLite writes to one of its files at once: a WAL
// frame (a page of up to 64 KiB and its header), a database page, or a
// 32 KiB region of the -shm file. A file within that of the file size
// limit, or a file system with less than that free, cannot take the next
// write.
const spaceSlack = 64<<10 + 24

// spaceShortage says why writes to files (the database file, its WAL and
// -shm file) fail for lack of space, or returns "" when they need not:
// one of them is at the process's file size limit (RLIMIT_FSIZE, a write
// past which fails with EFBIG), or the file system holding them has no
// space left for this process. SQLite reports either as a plain disk I/O
// error (SQLITE_IOERR) rather than SQLITE_FULL, except for a write into
// the WAL or the database file that failed with ENOSPC.
func spaceShortage(files []string) string {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err == nil && lim.Cur != ^uint64(0) {
		at, size := "", int64(-1) // the largest file within reach of the limit
		for _, p := range files {
			if fi, err := os.Stat(p); err == nil && uint64(fi.Size())+spaceSlack > lim.Cur && fi.Size() > size {
				at, size = p, fi.Size()
			}
		}
		if at != "" {
			return fmt.Sprintf("%s has reached the process's file size limit (RLIMIT_FSIZE %d bytes)", at, lim.Cur)
		}
	}
	if len(files) == 0 {
		return ""
	}
	dir := filepath.Dir(files[0])
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return "" // a file system that does not count its blocks
	}
	free := st.Bavail // root may also use the blocks reserved for it
	if os.Geteuid() == 0 {
		free = st.Bfree
	}
	if free*uint64(st.Bsize) < spaceSlack {
		return fmt.Sprintf("the file system holding %s has no space left", dir)
	}
	return ""
}
