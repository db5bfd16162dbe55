//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import (
	"os"
	"syscall"
	"unsafe"
)

// onControllingTerminal reports whether any of streams is a terminal that
// is retryq's controlling terminal. Asking a terminal for its foreground
// process group succeeds only for the caller's controlling terminal.
func onControllingTerminal(streams ...any) bool {
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		var errno syscall.Errno
		var pgrp int32
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
		}); err == nil && errno == 0 {
			return true
		}
	}
	return false
}
