//go:build linux

package leakcheck

import (
	"os"
	"strconv"
)

// openFDs returns the targets of the process's open descriptors, read
// from /proc/self/fd ("socket:[N]", a file's path, ...), or nil when
// they cannot be read. The descriptor of the directory read is left out.
func openFDs() []string {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	defer d.Close()
	self := strconv.FormatUint(uint64(d.Fd()), 10)
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n == self {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + n)
		if err != nil {
			continue // closed meanwhile
		}
		out = append(out, target)
	}
	return out
}
