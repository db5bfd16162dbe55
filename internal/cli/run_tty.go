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
		if _, ok := foregroundGroup(s); ok {
			return true
		}
	}
	return false
}

// inTerminalForeground reports whether retryq's process group is the
// foreground process group of its controlling terminal, found among
// streams: the group that the terminal's Ctrl-C reaches.
func inTerminalForeground(streams ...any) bool {
	for _, s := range streams {
		if pgrp, ok := foregroundGroup(s); ok {
			return pgrp == syscall.Getpgrp()
		}
	}
	return false
}

// foregroundGroup returns the foreground process group of s, when s is a
// file that is retryq's controlling terminal.
func foregroundGroup(s any) (int, bool) {
	f, ok := s.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	var errno syscall.Errno
	var pgrp int32
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(pgrp), true
}
